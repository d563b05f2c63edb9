"""The governor's machinery: pure AIMD rules, header parsing and where its state lives.

:mod:`teamlead.governor` is the public face (``Governor``, ``GovernorPolicy``, ``Slot``);
the modules here hold the parts that need no event loop, so they are tested alone:

* :mod:`.aimd`: the rules that move one bucket's learnt limit (pure functions).
* :mod:`.retry_after`: ``Retry-After`` / ``retry-after-ms`` parsing.
* :mod:`.ratelimit_headers`: the ``anthropic-ratelimit-*`` headers and the pause they ask for.
* :mod:`.token_estimate`: a request's input tokens, estimated from its body before it goes.
* :mod:`.token_budget`: the rate-limit windows as token buckets, and when a request fits.
* :mod:`.policy`: the knobs (``GovernorPolicy``, static ceilings), the bucket snapshot.
* :mod:`.store`: where a process alone keeps the learnt limits (a Protocol, in memory).
* :mod:`.stored`: what a shared account stores, read back as untrusted input.
* :mod:`.account`: what every process of one account shares (learnt limits and one lease
  per slot held), this process alone, and the fallback when a shared store fails.
* :mod:`.sqlite_account`: the account of every process of the user on this machine.
* :mod:`.redis_account`: the account of every machine, through Redis.
* :mod:`.accounts`: choosing one from a ``--limits`` value.
"""
