"""``trialog keyring generate|export|files|token``: the deployment's keyring, restricted
keyrings for actor services, key files for a Kubernetes Secret, join tokens (:mod:`trialog.trust`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trialog.trust.join_tokens import mint_join_token
from trialog.trust.keys import Keyring, TrustError, actor_key_id, b64url


def add(sub) -> None:
    """``trialog keyring generate|export|files|token``."""
    keyring = sub.add_parser(
        "keyring", help="Make the deployment's keyring, restricted keyrings for actor services, join tokens."
    )
    ksub = keyring.add_subparsers(metavar="ACTION")
    generate = ksub.add_parser(
        "generate", help="Write a new keyring (a random 32-byte secret per role), readable by its owner only."
    )
    generate.add_argument("file", metavar="FILE")
    generate.add_argument("--force", action="store_true", help="replace an existing file")
    export = ksub.add_parser(
        "export",
        help="Write the keyring an actor service of one implementation gets: its own key only "
        '({"trialog_keyring": 1, "keys": {"actors.NAME": base64url}}, docs/protocol.md).',
    )
    export.add_argument("file", metavar="FILE", help="the deployment's keyring")
    export.add_argument("--implementation", required=True, metavar="NAME")
    export.add_argument("--out", required=True, metavar="FILE")
    files = ksub.add_parser(
        "files",
        help="Write one file per key id, named by it and holding its base64url key (what a Kubernetes "
        "Secret holds), actor keys derived for each --implementation.",
    )
    files.add_argument("file", metavar="FILE", help="the deployment's keyring")
    files.add_argument("folder", metavar="DIR")
    files.add_argument(
        "--implementation",
        action="append",
        default=[],
        metavar="NAME",
        help="an actor implementation to derive actors.NAME for (repeatable)",
    )
    token = ksub.add_parser("token", help="Print a join token for one seat of one trial (needs the seats key).")
    token.add_argument("file", metavar="FILE", help="a keyring holding the seats key")
    token.add_argument("--trial", required=True, metavar="TRIAL_ID")
    token.add_argument("--actor", required=True, metavar="NAME")
    token.add_argument("--ttl", type=float, default=3600.0, metavar="SECONDS")

    generate.set_defaults(func=_generate)
    export.set_defaults(func=_export)
    files.set_defaults(func=_files)
    token.set_defaults(func=_token)


def _generate(args: argparse.Namespace) -> int:
    if Path(args.file).exists() and not args.force:
        raise TrustError(f"{args.file} exists; pass --force to replace it (every service then needs the new one)")
    print(Keyring.generate().save(args.file))
    return 0


def _load(path: str) -> Keyring:
    try:
        return Keyring.from_json(Path(path).read_bytes(), path)
    except OSError as exc:
        raise TrustError(f"cannot read the keyring {path}: {exc.strerror}") from None


def _export(args: argparse.Namespace) -> int:
    print(_load(args.file).restricted_to(args.implementation).save(args.out))
    return 0


def _files(args: argparse.Namespace) -> int:
    ring = _load(args.file)
    keys = dict(ring.keys)
    for name in args.implementation:
        keys[actor_key_id(name)] = ring.restricted_to(name).keys[actor_key_id(name)]
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for key_id, secret in sorted(keys.items()):
        fd = os.open(folder / key_id, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(b64url(secret))
    print(folder)
    return 0


def _token(args: argparse.Namespace) -> int:
    print(mint_join_token(_load(args.file), args.trial, args.actor, ttl_s=args.ttl))
    return 0
