"""Authentication and authorization: SASL mechanisms (PLAIN, SCRAM-SHA-256/512), sans-IO."""
