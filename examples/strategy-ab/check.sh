#!/bin/sh
# The check of examples/strategy-ab.toml: ANSWER.md has a finding for every part named.
[ -f ANSWER.md ] || { echo "no ANSWER.md"; exit 1; }
for part in "$@"; do
    grep -qF "FINDING[$part]" ANSWER.md || { echo "no finding for $part"; exit 1; }
done
echo "every part has a finding"
