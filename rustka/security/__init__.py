"""Who is on the other end of a connection: principals, SASL and SCRAM, credentials.

Protocol-neutral: nothing here knows the Kafka or the native wire formats beyond
the SASL payloads themselves, and the pure parts (SCRAM maths, message parsing,
the credential file's format) import no Twisted.
"""
