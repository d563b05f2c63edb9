"""The governor's machinery: pure AIMD rules, header parsing and where its state lives.

:mod:`teamlead.governor` is the public face (``Governor``, ``GovernorPolicy``, ``Slot``);
the modules here hold the parts that need no event loop, so they are tested alone:

* :mod:`.aimd`: the rules that move one bucket's learnt limit (pure functions).
* :mod:`.retry_after`: ``Retry-After`` / ``retry-after-ms`` parsing.
* :mod:`.ratelimit_headers`: the ``anthropic-ratelimit-*`` headers and the pause they ask for.
* :mod:`.token_estimate`: a request's input tokens, estimated from its body before it goes.
* :mod:`.token_budget`: the rate-limit windows as token buckets, and when a request fits.
* :mod:`.knobs`: the knobs (``GovernorPolicy``, static ceilings), the bucket snapshot.
* :mod:`.store`: where a process alone keeps the learnt limits (a Protocol, in memory).
* :mod:`.accounts`: what every process of one account shares (learnt limits and one lease
  per slot held), one variant per module: ``base`` (the interface), ``process`` (this
  process alone), ``machine`` (every process of the user on this machine, an SQLite
  file), ``redis`` (every machine, through Redis), ``namespaced`` (one upstream account's
  part of a shared store), ``fallback`` (the next one down when a shared store fails),
  ``renewer`` (the lease renewer) and ``codecs`` (what a shared account stores, read back
  as untrusted input); ``open_account`` chooses one from a ``--limits`` value.
"""
