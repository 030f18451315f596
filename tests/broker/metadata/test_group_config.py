"""Group config overrides: validation, their metadata record, and the image fold."""

from __future__ import annotations

import pytest

from pylog_nb.broker.controller.quorum import image_records
from pylog_nb.broker.metadata import group_config
from pylog_nb.broker.metadata.image import ClusterImage, apply, replay
from pylog_nb.broker.metadata.records import GroupConfigChange, record_from_json


def test_valid_overrides_are_normalised_and_bad_ones_name_the_key() -> None:
    assert group_config.validate({"share.auto.offset.reset": " earliest "}) == {
        "share.auto.offset.reset": "earliest"}
    assert group_config.validate({"share.auto.offset.reset": "by_duration:PT1H30M"})
    for bad in ({"share.isolation.level": "read_some"}, {"share.record.lock.duration.ms": "9"},
                {"nope": "1"}, {"share.auto.offset.reset": None}):
        with pytest.raises(group_config.InvalidGroupConfigError, match=next(iter(bad))):
            group_config.validate(bad)


def test_a_session_timeout_must_stay_above_its_heartbeat_interval() -> None:
    defaults = {"consumer.session.timeout.ms": "45000",
                "consumer.heartbeat.interval.ms": "5000"}
    group_config.validate({"consumer.session.timeout.ms": "6000"}, defaults)
    with pytest.raises(group_config.InvalidGroupConfigError, match="must be greater than"):
        group_config.validate({"consumer.session.timeout.ms": "6000",
                               "consumer.heartbeat.interval.ms": "6000"}, defaults)


def test_by_duration_is_read_as_kafka_writes_it() -> None:
    assert group_config.by_duration_ms("by_duration:P1DT2H3M4S") == (
        ((24 + 2) * 60 + 3) * 60 + 4) * 1000
    assert group_config.by_duration_ms("earliest") is None


def test_the_record_round_trips_and_folds_into_the_image_and_back() -> None:
    record = GroupConfigChange(group="g", configs={"share.isolation.level": "read_committed"})
    assert record_from_json(record.to_json()) == record
    image = apply(ClusterImage.empty(), record)
    assert dict(image.group_configs["g"]) == {"share.isolation.level": "read_committed"}
    assert replay(image_records(image)) == image  # a snapshot keeps them
    cleared = apply(image, GroupConfigChange(group="g", configs={}))
    assert "g" not in cleared.group_configs
