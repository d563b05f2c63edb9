"""The governor's machinery: pure AIMD rules, header parsing and the state store.

:mod:`teamlead.governor` is the public face (``Governor``, ``GovernorPolicy``, ``Slot``);
the modules here hold the parts that need no event loop, so they are table-tested alone:

* :mod:`.aimd`: the rules that move one bucket's learnt limit (pure functions).
* :mod:`.retry_after`: ``Retry-After`` / ``retry-after-ms`` parsing.
* :mod:`.ratelimit_headers`: the ``anthropic-ratelimit-*`` headers and the pause they ask for.
* :mod:`.store`: where the learnt limits live (a Protocol, and the in-process store).
"""
