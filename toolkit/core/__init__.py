"""The floor everything stands on: the vocabulary, token bitmasks, the engine protocol and its
batch half, the token trie, the C session that runs the protocol's rules, typed ids, errors
and memo tables.
"""
