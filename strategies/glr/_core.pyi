"""Type stub of the Cython module strategies.glr._core (see its docstring)."""

from typing import Any

import numpy.typing as npt

from strategies.llguidance.parser import EarleyParser, ParserTables

__all__ = ["GLRTables", "GLRParser"]

class GLRTables(ParserTables):
    @property
    def n_states(self) -> int: ...
    @property
    def n_term(self) -> int: ...
    @property
    def n_prods(self) -> int: ...
    @property
    def conflicts(self) -> int: ...
    @property
    def lr_bytes(self) -> int: ...
    @property
    def store_bytes(self) -> int: ...
    @property
    def max_store_bytes(self) -> int: ...
    @property
    def store_hits(self) -> int: ...
    @property
    def store_inserts(self) -> int: ...
    @property
    def store_entries(self) -> int: ...
    def __init__(
        self,
        dr_sym: npt.ArrayLike,
        dr_lhs: npt.ArrayLike,
        nt_off: npt.ArrayLike,
        nt_drs: npt.ArrayLike,
        nullable: npt.ArrayLike,
        n_nt: int,
        lexemes: Any,
        skip: int,
        *,
        n_states: int,
        n_term: int,
        sh_off: npt.ArrayLike,
        sh_lex: npt.ArrayLike,
        sh_to: npt.ArrayLike,
        goto_off: npt.ArrayLike,
        goto_nt: npt.ArrayLike,
        goto_to: npt.ArrayLike,
        rd_off: npt.ArrayLike,
        rd_la: npt.ArrayLike,
        rd_prod: npt.ArrayLike,
        prod_lhs: npt.ArrayLike,
        prod_len: npt.ArrayLike,
        cand_off: npt.ArrayLike,
        cand_lex: npt.ArrayLike,
        conflicts: int,
        max_lexer_states: int,
        max_row_items: int,
        max_steps: int,
        n_slices: int = 0,
        max_store_bytes: int = 0,
    ) -> None: ...
    def memory_bytes(self) -> int: ...

class GLRParser(EarleyParser):
    @property
    def reductions(self) -> int: ...
    def __init__(self, tables: ParserTables, _empty: bool = False, use_cache: bool = True) -> None: ...
    def row_nodes(self, k: int) -> list[tuple[int, list[int], bool]]: ...
