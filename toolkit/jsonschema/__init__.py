"""JSON Schema to the grammar IR, shared by every strategy (:func:`from_json_schema`)."""

from toolkit.jsonschema.compiler import (
    ANY_ORDER_MAX,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_RULES,
    PROPERTY_ORDERS,
    SPELLINGS,
    JsonSchemaText,
    from_json_schema,
    grammar_of,
    json_schema_to_regex,
    schema_text,
)

__all__ = [
    "ANY_ORDER_MAX",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_RULES",
    "from_json_schema",
    "grammar_of",
    "json_schema_to_regex",
    "JsonSchemaText",
    "PROPERTY_ORDERS",
    "schema_text",
    "SPELLINGS",
]
