"""The domain's nouns: its vocabulary, errors, limits, ids and keys, the message catalogue
(every command, event and record written to Kafka), and the folded state of a run.

May import: the standard library and pydantic only. Every other room of the domain builds
on this one; it imports none of them.
"""
