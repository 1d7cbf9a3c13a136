"""ACLs, SASL and SCRAM credentials (docs/security.md, docs/kafka.md "Authentication").

Each API's structs are followed by its one declaration (`api`), which registers it
in `APIS`; rustka/kafka/messages/__init__.py says how to read them.
"""

from __future__ import annotations

from rustka.kafka.schema import BYTES, INT8, INT16, INT32, INT64, STRING, Array

from .registry import ApiKey, F, api, msg

# --- ACLs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ------------------------
# Codes are Kafka's (rustka.security.acl); a pattern type absent before v1 is LITERAL.

_ACL_ENTRY = (
    F("principal", STRING),
    F("host", STRING),
    F("operation", INT8),
    F("permission_type", INT8),
)

_ACL_FILTER = (
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+"),
    F("pattern_type_filter", INT8, "1+", default=3),
    F("principal_filter", STRING, nullable="0+"),
    F("host_filter", STRING, nullable="0+"),
    F("operation", INT8),
    F("permission_type", INT8),
)

DESCRIBE_ACLS_REQUEST = msg("DescribeAclsRequest", *_ACL_FILTER)

DESCRIBE_ACLS_RESPONSE = msg(
    "DescribeAclsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F(
        "resources",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("pattern_type", INT8, "1+", default=3),
            F("acls", list(_ACL_ENTRY)),
        ],
    ),
)

# ACLs (docs/security.md, "Authorization (ACLs)"): v0-3, flexible from v2.
api(
    ApiKey.DESCRIBE_ACLS,
    "DescribeAcls",
    (0, 3),
    2,
    DESCRIBE_ACLS_REQUEST,
    DESCRIBE_ACLS_RESPONSE,
)

CREATE_ACLS_REQUEST = msg(
    "CreateAclsRequest",
    F(
        "creations",
        [
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("resource_pattern_type", INT8, "1+", default=3),
            *_ACL_ENTRY,
        ],
    ),
)

CREATE_ACLS_RESPONSE = msg(
    "CreateAclsResponse",
    F("throttle_time_ms", INT32),
    F("results", [F("error_code", INT16), F("error_message", STRING, nullable="0+")]),
)

api(
    ApiKey.CREATE_ACLS,
    "CreateAcls",
    (0, 3),
    2,
    CREATE_ACLS_REQUEST,
    CREATE_ACLS_RESPONSE,
)

DELETE_ACLS_REQUEST = msg("DeleteAclsRequest", F("filters", list(_ACL_FILTER)))

DELETE_ACLS_RESPONSE = msg(
    "DeleteAclsResponse",
    F("throttle_time_ms", INT32),
    F(
        "filter_results",
        [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F(
                "matching_acls",
                [
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                    F("resource_type", INT8),
                    F("resource_name", STRING),
                    F("pattern_type", INT8, "1+", default=3),
                    *_ACL_ENTRY,
                ],
            ),
        ],
    ),
)

api(
    ApiKey.DELETE_ACLS,
    "DeleteAcls",
    (0, 3),
    2,
    DELETE_ACLS_REQUEST,
    DELETE_ACLS_RESPONSE,
)

# --- SASL (17, 36) and SCRAM credentials (50, 51): docs/kafka.md, "Authentication" ----

SASL_HANDSHAKE_REQUEST = msg("SaslHandshakeRequest", F("mechanism", STRING))

SASL_HANDSHAKE_RESPONSE = msg(
    "SaslHandshakeResponse", F("error_code", INT16), F("mechanisms", Array(STRING))
)

# Authentication (docs/kafka.md, "Authentication"): SaslAuthenticate v2 and the
# SCRAM credential APIs are flexible.
api(
    ApiKey.SASL_HANDSHAKE,
    "SaslHandshake",
    (0, 1),
    None,
    SASL_HANDSHAKE_REQUEST,
    SASL_HANDSHAKE_RESPONSE,
)

SASL_AUTHENTICATE_REQUEST = msg("SaslAuthenticateRequest", F("auth_bytes", BYTES))

SASL_AUTHENTICATE_RESPONSE = msg(
    "SaslAuthenticateResponse",
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
)

api(
    ApiKey.SASL_AUTHENTICATE,
    "SaslAuthenticate",
    (0, 2),
    2,
    SASL_AUTHENTICATE_REQUEST,
    SASL_AUTHENTICATE_RESPONSE,
)

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = msg(
    "DescribeUserScramCredentialsRequest",
    F("users", [F("name", STRING)], nullable="0+"),
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = msg(
    "DescribeUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F(
        "results",
        [
            F("user", STRING),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("credential_infos", [F("mechanism", INT8), F("iterations", INT32)]),
        ],
    ),
)

api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    "DescribeUserScramCredentials",
    (0, 0),
    0,
    DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
    DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = msg(
    "AlterUserScramCredentialsRequest",
    F("deletions", [F("name", STRING), F("mechanism", INT8)]),
    F(
        "upsertions",
        [
            F("name", STRING),
            F("mechanism", INT8),
            F("iterations", INT32),
            F("salt", BYTES),
            F("salted_password", BYTES),
        ],
    ),
)

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = msg(
    "AlterUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        [
            F("user_name", STRING),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ],
    ),
)

api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    "AlterUserScramCredentials",
    (0, 0),
    0,
    ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
    ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
)
