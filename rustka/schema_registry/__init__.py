"""The schema registry's pure core: the schema formats it accepts (Avro, JSON Schema,
Protobuf), their canonical forms, and the compatibility rules between versions of a
subject (docs/schema-registry.md). Nothing here imports Twisted."""
