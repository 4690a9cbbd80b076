"""The roles of a deployment, named once.

A role is at once the key id a process tags its records with (:mod:`trialog.trust`),
the owner of a kind of bad record in the dead-letter rule (:mod:`trialog.protocol.owners`)
and the part a service plays (:attr:`trialog.runtime.handler.Handler.owner_role`). The names
are on the wire: a tag header is ``mac.<role>``, and services in other languages use the
same words (docs/protocol.md, docs/security.md).

Not a role: the *sender name* of the environment's records, ``env``
(:data:`trialog.protocol.events.ENVIRONMENT_SENDER`).
"""

from __future__ import annotations

ORCHESTRATOR = "orchestrator"
ENVIRONMENT = "environment"
CONTROLLER = "controller"
GATEWAY = "gateway"
LEARNER = "learner"
ACTORS = "actors"
SEATS = "seats"
ROLES = (ORCHESTRATOR, ENVIRONMENT, CONTROLLER, GATEWAY, LEARNER, ACTORS, SEATS)
