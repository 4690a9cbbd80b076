"""Who wrote a record: keyrings, record tags (HMAC-SHA256), the authenticator, seats and join tokens.

Kafka does not tell a consumer who produced a record, so every record on ``control`` and
``events`` carries HMAC-SHA256 tags in its headers, and the service that owns a record
kind drops (and dead-letters) a record that lacks the tag of a key its sender is allowed
to hold (I-9). ``docs/security.md`` is the threat model; the docstrings of the modules
are the API and the wire format, for the SDKs of other languages too:

- :mod:`~trialog.trust.keys`: key ids, key derivation, :class:`~trialog.trust.keys.Keyring`
  (from a file, a directory, ``TRIALOG_KEY_*`` variables or the local development keyring);
- :mod:`~trialog.trust.tags`: what a tag is computed over, its headers, HMAC-SHA256;
- :mod:`~trialog.trust.authenticator`: who may write what, and the
  :class:`~trialog.trust.authenticator.Authenticator` that tags and checks records;
- :mod:`~trialog.trust.seats`: client seats and their holders, as the log says;
- :mod:`~trialog.trust.join_tokens`: the self-contained, expiring tokens that give a seat.

In short::

    keyring = Keyring.load(settings)                   # file, directory, env vars, or the dev keyring
    trust = Authenticator(keyring, role="controller")  # a Bus makes one: bus.trust
    headers += trust.tag(trial_id, headers, value)     # Bus.to_record does this
    reason = trust.check(record)                       # None, or why the record is refused
    token = mint_join_token(keyring, trial_id, "bob", ttl_s=3600)

May import the standard library, orjson, :mod:`trialog.errors`, :mod:`trialog.settings`
and :mod:`trialog.protocol` (the role names, the event kinds); never the bus, the
runtimes, :mod:`trialog.services`, :mod:`trialog.tools` or the command line, which all
stand on it. ``trialog keyring …`` is :mod:`trialog.commands.trust`.
"""
