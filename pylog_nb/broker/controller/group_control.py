"""The controller's decisions on groups' config overrides (IncrementalAlterConfigs, GROUP).

A decision replaces a group's overrides by a checked set (``GroupConfigChange``); an empty set
removes the group from the image's ``group_configs``. The broker that forwards the request has
merged the change into the current overrides and checked the result against its defaults (a
session timeout above its heartbeat interval); the controller checks every name and value.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..metadata import group_config
from ..metadata.records import GroupConfigChange, MetadataRecord
from . import errors
from .errors import ControllerError

GROUP_ID_BYTES_MAX = 32_767  # a group id is a Kafka STRING: int16 length


def plan_alter_group_configs(group: str, configs: Mapping[str, str | None]
                             ) -> list[MetadataRecord]:
    """The record that makes ``configs`` the overrides of ``group``; refused: INVALID_CONFIG."""
    if not group or len(group.encode()) > GROUP_ID_BYTES_MAX:
        raise ControllerError(errors.INVALID_GROUP_ID, f"invalid group id {group!r}")
    try:
        checked = group_config.validate(configs)
    except group_config.InvalidGroupConfigError as error:
        raise ControllerError(errors.INVALID_CONFIG, str(error)) from None
    return [GroupConfigChange(group=group, configs=checked)]
