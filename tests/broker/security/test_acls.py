"""ACL codes, bindings, filters (Kafka's ``matches``, MATCH included), CreateAcls validation, and
the ACL requests' wire helpers against kio's decoded requests."""

from __future__ import annotations

import pytest
from kio.schema.create_acls.v3.request import AclCreation
from kio.schema.delete_acls.v3.request import DeleteAclsFilter
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.static.primitive import i8
from support.acl_record import Record

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_from_creation,
    creation_result,
    deletions,
    describe_resources,
    describe_result,
    filter_from_wire,
    filter_result,
    validate_binding,
    validate_filter,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
READ, WRITE = AclOperation.READ, AclOperation.WRITE




def binding(rtype=TOPIC, name="orders", pattern=LITERAL, principal="User:alice", host="*",
            operation=READ, permission=ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, operation, permission)


def test_codes_are_kafkas():
    assert [(m.name, m.value) for m in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [(m.name, m.value) for m in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert [m.value for m in AclOperation] == list(range(15))
    assert AclOperation.IDEMPOTENT_WRITE == 12 and AclOperation.DESCRIBE_TOKENS == 14
    assert [(m.name, m.value) for m in AclPermissionType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]


def test_plain_int_codes_become_enum_members():
    b = AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)
    assert b == binding() and b.resource_type is ResourceType.TOPIC
    assert validate_binding(AclBinding(2, "orders", 9, "User:alice", "*", 3, 3)) == (
        "Invalid patternType UNKNOWN")
    assert AclBindingFilter(resource_type=3).resource_type is ResourceType.GROUP


def test_binding_of_a_record_takes_codes_and_maps_unknown_ones():
    record = Record("id1", 2, "orders", 4, "User:bob", "10.0.0.1", 4, 2)
    assert AclBinding.of(record) == binding(
        pattern=PREFIXED, principal="User:bob", host="10.0.0.1", operation=WRITE,
        permission=DENY)
    odd = Record("id2", 99, "x", 3, "User:bob", "*", 77, 3)
    assert AclBinding.of(odd).resource_type == ResourceType.UNKNOWN
    assert AclBinding.of(odd).operation == AclOperation.UNKNOWN


# -- filters --------------------------------------------------------------------------------------


def test_the_any_filter_matches_everything():
    for b in (binding(), binding(CLUSTER, "kafka-cluster"), binding(pattern=PREFIXED),
              binding(permission=DENY, host="1.2.3.4")):
        assert AclBindingFilter().matches(b)


def test_filter_fields_select():
    b = binding()
    assert AclBindingFilter(resource_type=TOPIC).matches(b)
    assert not AclBindingFilter(resource_type=GROUP).matches(b)
    assert AclBindingFilter(principal="User:alice").matches(b)
    assert not AclBindingFilter(principal="User:bob").matches(b)
    assert AclBindingFilter(host="*").matches(b)
    assert not AclBindingFilter(host="1.2.3.4").matches(b)
    assert AclBindingFilter(operation=READ).matches(b)
    assert not AclBindingFilter(operation=WRITE).matches(b)
    assert not AclBindingFilter(operation=AclOperation.ALL).matches(b)  # no implication
    assert AclBindingFilter(permission_type=ALLOW).matches(b)
    assert not AclBindingFilter(permission_type=DENY).matches(b)


def test_filter_by_name_and_pattern_type_is_exact():
    literal, prefixed = binding(name="orders"), binding(name="ord", pattern=PREFIXED)
    assert AclBindingFilter(resource_name="orders").matches(literal)  # pattern ANY
    assert not AclBindingFilter(resource_name="orders").matches(prefixed)
    assert AclBindingFilter(resource_name="ord", pattern_type=PREFIXED).matches(prefixed)
    assert not AclBindingFilter(resource_name="ord", pattern_type=LITERAL).matches(prefixed)
    assert AclBindingFilter(pattern_type=LITERAL).matches(literal)
    assert not AclBindingFilter(pattern_type=LITERAL).matches(prefixed)
    # the wildcard is a name like any other outside MATCH
    assert not AclBindingFilter(resource_name="orders").matches(binding(name="*"))


def test_match_selects_what_applies_to_the_resource():
    match = AclBindingFilter(resource_type=TOPIC, resource_name="orders-eu",
                             pattern_type=MATCH)
    assert match.matches(binding(name="orders-eu"))
    assert match.matches(binding(name="*"))
    assert match.matches(binding(name="orders", pattern=PREFIXED))
    assert match.matches(binding(name="orders-eu", pattern=PREFIXED))
    assert not match.matches(binding(name="orders"))  # a literal other name
    assert not match.matches(binding(name="orders-eu-1", pattern=PREFIXED))
    assert not match.matches(binding(name="invoices", pattern=PREFIXED))
    assert not match.matches(binding(GROUP, "orders-eu"))
    # MATCH without a name matches every pattern of the type
    assert AclBindingFilter(pattern_type=MATCH).matches(binding(pattern=PREFIXED))


def test_filters_work_on_records_too():
    record = Record("id1", 2, "orders", 3, "User:alice", "*", 3, 3)
    assert AclBindingFilter(resource_type=TOPIC, resource_name="orders").matches(record)
    assert not AclBindingFilter(principal="User:bob").matches(record)


def test_validate_filter_refuses_unknown_codes():
    assert validate_filter(AclBindingFilter()) is None
    assert validate_filter(AclBindingFilter(pattern_type=MATCH)) is None
    for field in ("resource_type", "pattern_type", "operation", "permission_type"):
        unknown = AclBindingFilter(**{field: 0})
        assert field in (validate_filter(unknown) or "")


# -- CreateAcls validation ------------------------------------------------------------------------


def test_a_valid_binding_passes():
    assert validate_binding(binding()) is None
    assert validate_binding(binding(name="ord", pattern=PREFIXED, host="10.1.2.3")) is None
    assert validate_binding(binding(name="*", host="::1", operation=AclOperation.ALL)) is None
    assert validate_binding(binding(CLUSTER, "kafka-cluster",
                                    operation=AclOperation.IDEMPOTENT_WRITE)) is None


@pytest.mark.parametrize("bad, words", [
    (binding(rtype=ResourceType.ANY), "resourceType ANY"),
    (binding(rtype=ResourceType.UNKNOWN), "resourceType UNKNOWN"),
    (binding(pattern=MATCH), "patternType MATCH"),
    (binding(pattern=PatternType.ANY), "patternType ANY"),
    (binding(pattern=PatternType.UNKNOWN), "patternType UNKNOWN"),
    (binding(operation=AclOperation.ANY), "operation ANY"),
    (binding(operation=AclOperation.UNKNOWN), "operation UNKNOWN"),
    (binding(permission=AclPermissionType.ANY), "permissionType ANY"),
    (binding(permission=AclPermissionType.UNKNOWN), "permissionType UNKNOWN"),
    (binding(name=""), "should not be empty"),
    (binding(CLUSTER, "my-cluster"), "kafka-cluster"),
    (binding(principal="alice"), "Could not parse principal"),
    (binding(principal="User:"), "Could not parse principal"),
    (binding(principal=":alice"), "Could not parse principal"),
    (binding(host="example.com"), "Invalid host"),
    (binding(host=""), "Invalid host"),
    (binding(host="10.0.0.300"), "Invalid host"),
])
def test_invalid_bindings_are_refused_with_kafkas_reason(bad, words):
    error = validate_binding(bad)
    assert error is not None and words in error
    assert creation_result(error) == {"error_code": Errors.INVALID_REQUEST,
                                      "error_message": error}


def test_creation_result_of_success():
    assert creation_result(None) == {"error_code": 0, "error_message": None}


# -- wire -----------------------------------------------------------------------------------------


def test_binding_from_a_kio_creation_and_a_mapping():
    creation = AclCreation(resource_type=i8(2), resource_name="orders",
                           resource_pattern_type=i8(4), principal="User:alice",
                           host="*", operation=i8(4), permission_type=i8(3))
    expected = binding(pattern=PREFIXED, operation=WRITE)
    assert binding_from_creation(creation) == expected
    as_dict = {"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 4,
               "principal": "User:alice", "host": "*", "operation": 4, "permission_type": 3}
    assert binding_from_creation(as_dict) == expected
    # CreateAcls v0 has no pattern type: LITERAL
    del as_dict["resource_pattern_type"]
    assert binding_from_creation(as_dict).pattern_type == LITERAL
    as_dict["operation"] = 42
    assert validate_binding(binding_from_creation(as_dict)) == "Invalid operation UNKNOWN"


def test_filters_from_describe_and_delete_requests():
    describe = DescribeAclsRequest(resource_type_filter=i8(2), resource_name_filter=None,
                                   pattern_type_filter=i8(2), principal_filter="User:alice",
                                   host_filter=None, operation=i8(1), permission_type=i8(1))
    assert filter_from_wire(describe) == AclBindingFilter(
        resource_type=TOPIC, pattern_type=MATCH, principal="User:alice")
    delete = DeleteAclsFilter(resource_type_filter=i8(1), resource_name_filter="orders",
                              pattern_type_filter=i8(3), principal_filter=None,
                              host_filter="10.0.0.1", operation=i8(3), permission_type=i8(2))
    assert filter_from_wire(delete) == AclBindingFilter(
        resource_name="orders", pattern_type=LITERAL, host="10.0.0.1", operation=READ,
        permission_type=DENY)
    assert filter_from_wire({"resource_type_filter": 1, "operation": 1,
                             "permission_type": 1}).pattern_type == LITERAL


def test_describe_groups_bindings_by_resource_pattern():
    bindings = [binding(principal="User:bob"), binding(name="ord", pattern=PREFIXED),
                binding(operation=WRITE, permission=DENY), binding(GROUP, "g1")]
    resources = describe_resources(bindings)
    assert [(r["resource_type"], r["resource_name"], r["pattern_type"]) for r in resources] == [
        (2, "ord", 4), (2, "orders", 3), (3, "g1", 3)]
    orders = resources[1]
    assert orders["acls"] == [
        {"principal": "User:alice", "host": "*", "operation": 4, "permission_type": 2},
        {"principal": "User:bob", "host": "*", "operation": 3, "permission_type": 3},
    ]
    assert all(type(v) is int for r in resources for v in (r["resource_type"],
                                                           r["pattern_type"]))
    assert describe_resources([]) == []


def test_deletions_answer_each_filter_and_delete_each_acl_once():
    records = [Record("a", 2, "orders", 3, "User:alice", "*", 3, 3),
               Record("b", 2, "ord", 4, "User:alice", "*", 4, 3),
               Record("c", 3, "g1", 3, "User:bob", "*", 3, 3)]
    filters = [AclBindingFilter(resource_type=TOPIC, resource_name="orders",
                                pattern_type=MATCH),
               AclBindingFilter(principal="User:alice"),
               AclBindingFilter(resource_type=ResourceType.UNKNOWN),
               AclBindingFilter(principal="User:nobody")]
    per_filter, ids = deletions(records, filters)
    assert per_filter[0] == records[:2]
    assert per_filter[1] == records[:2]
    assert isinstance(per_filter[2], str) and "resource_type" in per_filter[2]
    assert per_filter[3] == []
    assert ids == ["a", "b"]


def test_filter_result_dicts():
    ok = filter_result([binding(name="ord", pattern=PREFIXED)])
    assert ok["error_code"] == 0 and ok["error_message"] is None
    assert ok["matching_acls"] == [{
        "error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "ord",
        "pattern_type": 4, "principal": "User:alice", "host": "*", "operation": 3,
        "permission_type": 3}]
    refused = filter_result([], "Unknown resource_type in the filter")
    assert refused["error_code"] == Errors.INVALID_REQUEST and refused["matching_acls"] == []


def test_describe_result_dicts():
    ok = describe_result([binding()])
    assert ok["error_code"] == 0 and ok["error_message"] is None
    assert [r["resource_name"] for r in ok["resources"]] == ["orders"]
    refused = describe_result([binding()], "Unknown operation in the filter")
    assert refused == {"error_code": Errors.INVALID_REQUEST,
                       "error_message": "Unknown operation in the filter", "resources": []}
