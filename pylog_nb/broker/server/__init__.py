"""The broker's asyncio shell, named as Kafka's ``server`` package.

``broker`` assembles a broker process; ``network`` serves sockets and frames; ``apis`` answers
each API key; ``node`` holds the parts the APIs are given; ``replica_manager``, ``purgatory`` and
``replica_fetcher`` host, complete and follow partitions; ``group_coordinator`` runs the group
coordinator cores; ``cluster_link``, ``lifecycle_manager``, ``alter_partition_manager`` and
``controller_admin`` are the link to the active controller; ``admin_http`` is the introspection
endpoint. The decisions live in sans-IO cores elsewhere (``replication``, ``group``,
``controller``).
"""
