"""The authorizer's decisions, StandardAuthorizer's semantics: DENY wins, literal / prefixed /
wildcard patterns, hosts, ``User:*``, super users, implied operations, the no-ACL default,
authorized-operations bit fields, KIP-679's authorization by resource type, and updates."""

from __future__ import annotations

import itertools
import random

import pytest
from support.acl_record import Record

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.security.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pylog_nb.broker.security.authorizer import (
    SUPPORTED_OPERATIONS,
    Authorizer,
    authorization_error,
)

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"
_ids = itertools.count()




def acl(name="orders", operation=Op.READ, permission=ALLOW, principal=ALICE, host="*",
        pattern=LITERAL, rtype=TOPIC, acl_id=None) -> Record:
    return Record(acl_id or f"acl-{next(_ids)}", int(rtype), name, int(pattern), principal, host,
                  int(operation), int(permission))


def can(authorizer: Authorizer, operation=Op.READ, name="orders", principal=ALICE, host=HOST,
        rtype=TOPIC) -> bool:
    return authorizer.authorize(principal, host, operation, rtype, name)


def test_no_acls_denies_by_default():
    assert not can(Authorizer())
    assert len(Authorizer()) == 0


def test_an_allow_allows_only_its_operation_principal_and_resource():
    authorizer = Authorizer([acl()])
    assert can(authorizer)
    assert not can(authorizer, Op.WRITE)
    assert not can(authorizer, principal=BOB)
    assert not can(authorizer, name="orders2")
    assert not can(authorizer, rtype=GROUP)


def test_deny_wins_over_allow():
    authorizer = Authorizer([acl(), acl(permission=DENY)])
    assert not can(authorizer)
    # ...whatever the order, and whatever pattern carries the deny
    for deny in (acl("*", permission=DENY), acl("ord", permission=DENY, pattern=PREFIXED),
                 acl(operation=Op.ALL, permission=DENY),
                 acl(principal="User:*", permission=DENY)):
        assert not can(Authorizer([deny, acl()]))
        assert not can(Authorizer([acl(), deny]))


def test_allow_all_and_deny_all():
    authorizer = Authorizer([acl(operation=Op.ALL)])
    for operation in SUPPORTED_OPERATIONS[TOPIC]:
        assert can(authorizer, operation)
    authorizer = Authorizer([acl(operation=Op.ALL), acl(operation=Op.ALL, permission=DENY)])
    assert not can(authorizer)


def test_literal_prefixed_and_wildcard_patterns():
    literal = Authorizer([acl("orders")])
    assert can(literal, name="orders")
    assert not can(literal, name="orders-eu")
    assert not can(literal, name="order")
    prefixed = Authorizer([acl("ord", pattern=PREFIXED)])
    assert can(prefixed, name="ord")
    assert can(prefixed, name="orders")
    assert can(prefixed, name="orders-eu")
    assert not can(prefixed, name="or")
    assert not can(prefixed, name="invoices")
    assert not can(prefixed, name="ORDERS")
    wildcard = Authorizer([acl("*")])
    assert can(wildcard, name="orders")
    assert can(wildcard, name="anything")
    assert not can(wildcard, rtype=GROUP)
    # a prefixed "*" is a prefix, not a wildcard
    star_prefix = Authorizer([acl("*", pattern=PREFIXED)])
    assert not can(star_prefix, name="orders")
    assert can(star_prefix, name="*orders")


def test_many_prefixes_of_different_lengths():
    acls = [acl("o", pattern=PREFIXED, operation=Op.WRITE),
            acl("ord", pattern=PREFIXED),
            acl("orders-eu", pattern=PREFIXED, permission=DENY),
            acl("x", pattern=PREFIXED, operation=Op.ALL)]
    authorizer = Authorizer(acls)
    assert can(authorizer, name="orders")
    assert not can(authorizer, name="orders-eu-1")
    assert can(authorizer, Op.WRITE, name="orders-eu-1")  # the deny is of READ only
    assert can(authorizer, Op.WRITE, name="other")
    assert not can(authorizer, name="other")
    assert can(authorizer, Op.DELETE, name="xyz")


def test_host_matching():
    authorizer = Authorizer([acl(host=HOST)])
    assert can(authorizer, host=HOST)
    assert not can(authorizer, host=OTHER_HOST)
    deny_one_host = Authorizer([acl(), acl(permission=DENY, host=OTHER_HOST)])
    assert can(deny_one_host, host=HOST)
    assert not can(deny_one_host, host=OTHER_HOST)


def test_the_wildcard_principal_matches_everyone():
    authorizer = Authorizer([acl(principal="User:*")])
    assert can(authorizer, principal=ALICE)
    assert can(authorizer, principal=BOB)
    assert can(authorizer, principal="Group:admins")  # Kafka: User:* matches any principal
    deny_bob = Authorizer([acl(principal="User:*"), acl(principal=BOB, permission=DENY)])
    assert can(deny_bob, principal=ALICE)
    assert not can(deny_bob, principal=BOB)
    # principals are compared whole: another type of the same name is another principal
    assert not can(Authorizer([acl(principal="Group:alice")]), principal=ALICE)


def test_super_users_are_allowed_everything_even_denied():
    authorizer = Authorizer([acl("*", operation=Op.ALL, permission=DENY, principal="User:*")],
                            super_users=("User:admin",))
    assert can(authorizer, principal="User:admin")
    assert can(authorizer, Op.CLUSTER_ACTION, "kafka-cluster", "User:admin", rtype=CLUSTER)
    assert not can(authorizer)
    assert not can(Authorizer(super_users=("User:admin",)))


def test_allows_imply_describe_and_describe_configs():
    for granted in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert can(Authorizer([acl(operation=granted)]), Op.DESCRIBE), granted
    for granted in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS):
        assert not can(Authorizer([acl(operation=granted)]), Op.DESCRIBE), granted
    assert can(Authorizer([acl(operation=Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS)
    assert not can(Authorizer([acl(operation=Op.ALTER)]), Op.DESCRIBE_CONFIGS)
    assert not can(Authorizer([acl(operation=Op.DESCRIBE)]), Op.READ)  # no reverse


def test_denies_imply_nothing():
    authorizer = Authorizer([acl(operation=Op.DESCRIBE),
                             acl(operation=Op.READ, permission=DENY)])
    assert can(authorizer, Op.DESCRIBE)
    assert not can(authorizer, Op.READ)
    denied_describe = Authorizer([acl(operation=Op.READ),
                                  acl(operation=Op.DESCRIBE, permission=DENY)])
    assert not can(denied_describe, Op.DESCRIBE)
    assert can(denied_describe, Op.READ)


def test_allow_everyone_if_no_acl_found():
    on = dict(allow_everyone_if_no_acl_found=True)
    assert can(Authorizer(**on))
    assert can(Authorizer([acl("other")], **on))  # ACLs of other resources do not count
    # any ACL matching the resource, even another principal's, ends the default
    assert not can(Authorizer([acl(principal=BOB)], **on))
    assert not can(Authorizer([acl(operation=Op.WRITE)], **on))
    assert not can(Authorizer([acl("ord", pattern=PREFIXED, principal=BOB)], **on))
    assert not can(Authorizer([acl("*", principal=BOB)], **on))
    assert not can(Authorizer([acl(host=OTHER_HOST)], **on))
    off = Authorizer([acl("other")])
    assert not can(off)


def test_authorized_operations_bit_fields():
    def bits(*operations):
        return sum(1 << op for op in operations)

    authorizer = Authorizer([acl(operation=Op.READ), acl(operation=Op.ALTER_CONFIGS)])
    assert authorizer.authorized_operations(ALICE, HOST, TOPIC, "orders") == bits(
        Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    assert authorizer.authorized_operations(BOB, HOST, TOPIC, "orders") == 0
    everything = Authorizer([acl(operation=Op.ALL, rtype=rtype, name="*")
                             for rtype in SUPPORTED_OPERATIONS])
    assert everything.authorized_operations(ALICE, HOST, TOPIC, "t") == bits(
        Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS)
    assert everything.authorized_operations(ALICE, HOST, GROUP, "g") == bits(
        Op.READ, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    assert everything.authorized_operations(ALICE, HOST, CLUSTER, "kafka-cluster") == bits(
        Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE)
    assert everything.authorized_operations(ALICE, HOST, TXN, "tx") == bits(
        Op.WRITE, Op.DESCRIBE)
    super_user = Authorizer(super_users=(ALICE,))
    assert super_user.authorized_operations(ALICE, HOST, TOPIC, "t") == bits(
        *SUPPORTED_OPERATIONS[TOPIC])
    group = Authorizer([acl("g", operation=Op.READ, rtype=GROUP)])
    assert group.authorized_operations(ALICE, HOST, GROUP, "g") == 0b1000 | 1 << Op.DESCRIBE


def test_authorization_errors_by_resource_type():
    assert authorization_error(TOPIC) == Errors.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(3) == Errors.GROUP_AUTHORIZATION_FAILED
    assert authorization_error(CLUSTER) == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert authorization_error(TXN) == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- KIP-679 ------------------------------------------------------------------------------------


def any_txn(*acls, **options) -> bool:
    return Authorizer(acls, **options).authorize_any(ALICE, HOST, Op.WRITE, TXN)


def test_authorize_any_needs_an_allow():
    assert not any_txn()
    assert any_txn(acl("tx-1", Op.WRITE, rtype=TXN))
    assert any_txn(acl("tx-", Op.WRITE, pattern=PREFIXED, rtype=TXN))
    assert any_txn(acl("tx-1", Op.ALL, rtype=TXN))
    assert any_txn(acl("*", Op.WRITE, principal="User:*", rtype=TXN))
    assert not any_txn(acl("tx-1", Op.WRITE, principal=BOB, rtype=TXN))
    assert not any_txn(acl("tx-1", Op.WRITE, host=OTHER_HOST, rtype=TXN))
    assert not any_txn(acl("tx-1", Op.DESCRIBE, rtype=TXN))
    assert not any_txn(acl("tx-1", Op.WRITE, rtype=TOPIC))


def test_authorize_any_allows_unless_every_allow_is_covered_by_a_deny():
    allow = acl("tx-1", Op.WRITE, rtype=TXN)
    assert not any_txn(allow, acl("tx-1", Op.WRITE, DENY, rtype=TXN))
    assert not any_txn(allow, acl("tx", Op.WRITE, DENY, pattern=PREFIXED, rtype=TXN))
    assert not any_txn(allow, acl("tx-1", Op.WRITE, DENY, pattern=PREFIXED, rtype=TXN))
    assert any_txn(allow, acl("tx-2", Op.WRITE, DENY, rtype=TXN))
    assert any_txn(allow, acl("tx-10", Op.WRITE, DENY, pattern=PREFIXED, rtype=TXN))
    assert any_txn(allow, acl("tx-1", Op.READ, DENY, rtype=TXN))
    # a literal deny does not cover a prefixed allow of the same name
    prefixed = acl("tx-", Op.WRITE, pattern=PREFIXED, rtype=TXN)
    assert any_txn(prefixed, acl("tx-", Op.WRITE, DENY, rtype=TXN))
    assert not any_txn(prefixed, acl("tx-", Op.WRITE, DENY, pattern=PREFIXED, rtype=TXN))
    # a deny of the wildcard covers everything, even the wildcard allow
    assert not any_txn(acl("*", Op.WRITE, rtype=TXN), acl("*", Op.ALL, DENY, rtype=TXN))
    assert any_txn(acl("*", Op.WRITE, rtype=TXN), acl("tx-1", Op.WRITE, DENY, rtype=TXN))


def test_authorize_any_super_users_and_default():
    deny_all = acl("*", Op.ALL, DENY, principal="User:*", rtype=TXN)
    authorizer = Authorizer([deny_all], super_users=(ALICE,))
    assert authorizer.authorize_any(ALICE, HOST, Op.WRITE, TXN)
    assert not authorizer.authorize_any(BOB, HOST, Op.WRITE, TXN)
    assert any_txn(allow_everyone_if_no_acl_found=True)
    with pytest.raises(ValueError):
        Authorizer().authorize_any(ALICE, HOST, Op.ANY, TXN)
    with pytest.raises(ValueError):
        Authorizer().authorize_any(ALICE, HOST, Op.WRITE, ResourceType.ANY)


# -- updates --------------------------------------------------------------------------------------


def test_add_remove_and_load_follow_the_image():
    authorizer = Authorizer()
    authorizer.add(acl(acl_id="a"))
    authorizer.add(acl("ord", pattern=PREFIXED, operation=Op.WRITE, acl_id="b"))
    assert can(authorizer) and can(authorizer, Op.WRITE)
    authorizer.add(acl(permission=DENY, acl_id="c"))
    assert not can(authorizer)
    authorizer.remove("c")
    assert can(authorizer)
    authorizer.remove("b")
    assert not can(authorizer, Op.WRITE)
    authorizer.remove("b")  # twice: ignored
    authorizer.add(acl(operation=Op.WRITE, acl_id="a"))  # same id replaces
    assert not can(authorizer) and can(authorizer, Op.WRITE)
    assert len(authorizer) == 1
    authorizer.load([acl(principal=BOB)])
    assert not can(authorizer, Op.WRITE) and can(authorizer, principal=BOB)


def test_acls_lists_bindings_through_a_filter():
    authorizer = Authorizer([acl(acl_id="a"), acl("g", rtype=GROUP, acl_id="b")])
    assert len(authorizer.acls()) == 2
    assert [b.resource_name for b in authorizer.acls(AclBindingFilter(resource_type=GROUP))] == [
        "g"]
    match = AclBindingFilter(resource_type=TOPIC, resource_name="orders",
                             pattern_type=PatternType.MATCH)
    assert [b.resource_name for b in authorizer.acls(match)] == ["orders"]


def test_the_index_agrees_with_a_brute_force_check():
    """Random ACLs: the indexed answer is the one a scan of every ACL gives."""
    rng = random.Random(23)
    names = ["a", "ab", "abc", "abd", "b", "*"]
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]
    for _ in range(30):
        acls = [acl(rng.choice(names), rng.choice(ops), rng.choice([ALLOW, DENY]),
                    rng.choice([ALICE, BOB, "User:*"]), rng.choice(["*", HOST]),
                    rng.choice([LITERAL, PREFIXED]))
                for _ in range(rng.randrange(0, 8))]
        authorizer = Authorizer(acls, allow_everyone_if_no_acl_found=rng.random() < 0.5)
        for name in ["a", "ab", "abc", "abcd", "b", "c", "*"]:
            for op in [Op.READ, Op.WRITE, Op.DESCRIBE]:
                assert can(authorizer, op, name) == _brute(authorizer, acls, op, name)


def _brute(authorizer: Authorizer, acls, op, name) -> bool:
    applying = [a for a in acls if (a.pattern_type == LITERAL and a.resource_name in (name, "*"))
                or (a.pattern_type == PREFIXED and name.startswith(a.resource_name))]
    mine = [a for a in applying if a.principal in (ALICE, "User:*") and a.host in ("*", HOST)]
    if any(a.permission_type == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}}.get(op, set())
    if any(a.permission_type == ALLOW and a.operation in {op, Op.ALL} | implied for a in mine):
        return True
    return not applying and authorizer.allow_everyone_if_no_acl_found


def test_adds_and_removes_agree_with_a_rebuild():
    """Random adds and removes leave the authorizer deciding as one built from what remains."""
    rng = random.Random(679)
    names = ["a", "ab", "abc", "b", "*"]
    live: dict[str, Record] = {}
    authorizer = Authorizer()
    for step in range(200):
        if live and rng.random() < 0.4:
            victim = rng.choice(sorted(live))
            del live[victim]
            authorizer.remove(victim)
        else:
            record = acl(rng.choice(names), rng.choice([Op.READ, Op.ALL]),
                         rng.choice([ALLOW, DENY]), pattern=rng.choice([LITERAL, PREFIXED]),
                         acl_id=f"r{rng.randrange(12)}")  # ids recur: a re-add replaces
            live[record.id] = record
            authorizer.add(record)
        rebuilt = Authorizer(live.values())
        assert len(authorizer) == len(rebuilt) == len(live), step
        for name in ["a", "ab", "abcd", "b", "c"]:
            assert can(authorizer, name=name) == can(rebuilt, name=name), (step, name)
