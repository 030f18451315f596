"""The one metadata model, shared by controllers and brokers.

``records``: metadata record types and their JSON form; ``image``: ClusterImage and ``apply``,
the fold of records (every controller folds its committed Raft log, every broker the same log as
fetched); ``follower``: a broker's copy of that log, folded and published once caught up;
``topics``: Kafka's rules for topic names; ``topic_config``: topic configs, their defaults and
validation.
"""
