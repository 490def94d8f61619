"""KV-cache pages: a pool with a fixed capacity and a prefix cache of shared prompt blocks.

A request holds `ceil(tokens / page_size)` private pages for its prompt, committed and provisional
(drafted) tokens, less the prompt blocks it shares through the prefix cache. Prefix blocks
(Mooncake's `hash_ids`, `block_size` tokens each, a whole number of pages) stay cached after
their last user finishes, and are evicted least-recently-used, only when unreferenced, when pages
run short.

Two pools, one interface (what the batcher calls; it never touches their insides):
- `KVPool` counts pages (the simulator: no identities needed, and fast);
- `PagedKVPool` gives pages identities (the runtime): a free list, a page table per request
  (shared prefix pages first, then private ones), prefix block -> pages, eviction that returns the
  ids it frees. Freed ids are logged for the executor (`take_freed`).

The interface: `free()`, `available()`, `pages_for(tokens)`; `grow(rids, have, need)` (evicting
unreferenced cached blocks if short; all or nothing), `resize(rids, have, need)` (no eviction:
shrinking, or growing within `free()`), `release(rid, have, blocks)`; prefix blocks:
`match_prefix(blocks)`, `attach_prefix(rid, blocks)`, `publish_prefix(rid, blocks)`,
`count_lookup(hits, queried)`. `have`/`need` are private page counts the batcher keeps in its
request table.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class PrefixCache:
    """Which prompt blocks are cached, their reference counts and LRU order (counting only)."""

    def __init__(self, block_pages: int):
        self.block_pages = block_pages
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced blocks, oldest first
        self.lookups = 0
        self.hit_blocks = 0
        self.queried_blocks = 0

    @property
    def pages(self) -> int:
        return len(self.refs) * self.block_pages

    def match(self, blocks) -> int:
        """Number of leading blocks already cached (they are chained hashes: a prefix match)."""
        n = 0
        for b in blocks:
            if b not in self.refs:
                break
            n += 1
        return n

    def acquire(self, blocks) -> None:
        """Reference cached blocks (all of `blocks` must be cached)."""
        for b in blocks:
            if self.refs[b] == 0:
                self.lru.pop(b, None)
            self.refs[b] += 1

    def count_lookup(self, hits: int, queried: int) -> None:
        """An admission's lookup: `hits` leading blocks found of `queried` full prompt blocks."""
        self.lookups += 1
        self.hit_blocks += hits
        self.queried_blocks += queried

    def publish(self, blocks) -> list[bool]:
        """A prompt's full blocks, now computed, become shared: referenced by the request that
        computed them. Returns, per block, whether it was already cached (computed meanwhile by
        another request: the caller's copy is a duplicate)."""
        refs, lru = self.refs, self.lru
        dup = []
        for b in blocks:
            if b in refs:
                if refs[b] == 0:
                    lru.pop(b, None)
                refs[b] += 1
                dup.append(True)
            else:
                refs[b] = 1
                dup.append(False)
        return dup

    def release(self, blocks) -> None:
        for b in blocks:
            r = self.refs.get(b)
            if r is None:
                continue
            self.refs[b] = r - 1
            if r == 1:
                self.lru[b] = None

    def evict(self, pages_needed: int) -> list[int]:
        """Evict unreferenced blocks, oldest first, until `pages_needed` are freed; returns the
        evicted blocks."""
        out = []
        while len(out) * self.block_pages < pages_needed and self.lru:
            b, _ = self.lru.popitem(last=False)
            del self.refs[b]
            out.append(b)
        return out

    def evictable_pages(self) -> int:
        return len(self.lru) * self.block_pages


def private_pages(tokens, shared, page_size: int):
    """Private pages for `tokens` KV tokens of which `shared` sit in the prefix cache: ceil((tokens -
    shared) / page_size), on ints or arrays. Every page count of a request comes from here."""
    return -(-(tokens - shared) // page_size)


class KVPool:
    """Page accounting for one replica: private pages per request plus the prefix cache."""

    def __init__(self, capacity_pages: int, page_size: int, block_size: int | None = None,
                 prefix_cache: bool = False):
        self.capacity = int(capacity_pages)
        self.page_size = int(page_size)
        self.private = 0
        self.cache = PrefixCache(max(1, (block_size or page_size) // page_size)) if prefix_cache and block_size else None
        self.peak = 0

    @property
    def used(self) -> int:
        return self.private + (self.cache.pages if self.cache else 0)

    def free(self) -> int:
        return self.capacity - self.used

    def available(self) -> int:
        """Free pages plus what evicting unreferenced cached blocks would give."""
        return self.free() + (self.cache.evictable_pages() if self.cache else 0)

    def pages_for(self, tokens: int) -> int:
        return private_pages(int(tokens), 0, self.page_size)

    # ---- private pages
    # The counting pool keeps a total only; PagedKVPool moves page ids in `_resize`. The counting
    # versions below skip that call: they run several times per simulated pass.
    def grow(self, rids, have, need) -> bool:
        """Give each request `need` private pages where it has `have`, evicting unreferenced
        cached blocks if short; False (and nothing changed) if they cannot fit."""
        # tuples: one admission (plain ints are cheaper than numpy for one request)
        if type(need) is tuple:
            pages = need[0] - have[0] if len(need) == 1 else sum(need) - sum(have)
        else:
            pages = sum((need - have).tolist())
        if pages > 0:
            cache = self.cache
            short = pages - (self.capacity - self.private - (cache.pages if cache else 0))
            if short > 0:
                if not cache or cache.evictable_pages() < short:
                    return False
                self._evicted(cache.evict(short))
        if self.has_ids:
            self._resize(rids, have, need, pages)
        else:
            self.private += pages
        if pages > 0:
            used = self.private + (self.cache.pages if self.cache else 0)
            if used > self.peak:
                self.peak = used
        return True

    def resize(self, rids, have, need) -> None:
        """Shrink (or grow within `free()`, which the caller checked) without eviction."""
        total = sum((need - have).tolist())
        if self.has_ids:
            self._resize(rids, have, need, total)
        else:
            self.private += total

    def release(self, rid: int, have: int, blocks) -> None:
        """A request leaves (finished or preempted): its private pages and prefix references."""
        if self.has_ids:
            self._resize([rid], [have], [0], -int(have))
        else:
            self.private -= int(have)
        if self.cache is not None and len(blocks):
            self.cache.release(blocks)

    def adjust(self, pages: int) -> None:
        """Counting only (the simulator's fast path): change the private total by `pages`."""
        self.private += pages

    def track_peak(self) -> None:
        if self.used > self.peak:
            self.peak = self.used

    def _resize(self, rids, have, need, total: int) -> None:
        self.private += total

    def _evicted(self, blocks: list[int]) -> None:
        pass

    # ---- prefix blocks
    def match_prefix(self, blocks) -> int:
        return self.cache.match(blocks)

    def attach_prefix(self, rid: int, blocks) -> None:
        """Reference a request's cached leading blocks (before its private pages are grown)."""
        self.cache.acquire(blocks)

    def detach_prefix(self, rid: int, blocks) -> None:
        self.cache.release(blocks)

    def count_lookup(self, hits: int, queried: int) -> None:
        self.cache.count_lookup(hits, queried)

    def publish_prefix(self, rid: int, blocks) -> int:
        """The request's next full prompt blocks (after those it holds through the cache) are
        computed: they become cached blocks, or, where another request cached them meanwhile,
        its duplicate pages are freed. Returns the private pages this takes from the request."""
        self.cache.publish(blocks)
        moved = len(blocks) * self.cache.block_pages
        self.private -= moved
        return moved

    has_ids = False  # page identities (and so freed-page logs)

    def take_freed(self) -> np.ndarray:
        """Page ids freed since the last call (none: this pool has no identities)."""
        return _NO_PAGES


_NO_PAGES = np.zeros(0, np.int64)
_NO_PAGES.flags.writeable = False


class PagedKVPool(KVPool):
    """`KVPool` with page identities, for the runtime. Page tables: `table(rid)` is the request's
    pages in position order (prefix-cache pages first)."""

    has_ids = True

    def __init__(self, capacity_pages: int, page_size: int, block_size: int | None = None,
                 prefix_cache: bool = False):
        super().__init__(capacity_pages, page_size, block_size, prefix_cache)
        self.free_ids: list[int] = list(range(self.capacity - 1, -1, -1))  # a stack: low ids first
        self.tables: dict[int, list[int]] = {}
        # rid -> stamp of its table's last change (growth, a cut, a prefix attached or swapped for
        # the cached copy): a reader may keep a converted copy until the stamp moves
        self.table_stamp: dict[int, int] = {}
        self._stamp = 0
        self.block_ids: dict[int, list[int]] = {}  # cached block -> its pages
        self.shared: dict[int, int] = {}  # request -> prefix-cache pages at the front of its table
        self.freed: list[int] = []

    def table(self, rid: int) -> np.ndarray:
        return np.asarray(self.tables.get(rid, ()), np.int64)

    def _give_back(self, ids) -> None:
        self.free_ids.extend(ids)
        self.freed.extend(ids)

    def _touch(self, rid: int) -> None:
        self._stamp += 1
        self.table_stamp[rid] = self._stamp

    def _resize(self, rids, have, need, total: int) -> None:
        for rid, h, n in zip(np.asarray(rids).tolist(), np.asarray(have).tolist(), np.asarray(need).tolist()):
            tbl = self.tables.setdefault(rid, [])
            if n != h:
                self._touch(rid)
            if n > h:
                if len(self.free_ids) < n - h:
                    raise RuntimeError("page pool exhausted: the batcher reserved more than is free")  # a bug
                tbl.extend(self.free_ids.pop() for _ in range(n - h))
            elif n < h:
                cut = len(tbl) - (h - n)
                self._give_back(tbl[cut:])
                del tbl[cut:]
            if not tbl:
                del self.tables[rid]
        self.private += total

    def _evicted(self, blocks: list[int]) -> None:
        for b in blocks:
            self._give_back(self.block_ids.pop(b))

    def attach_prefix(self, rid: int, blocks) -> None:
        super().attach_prefix(rid, blocks)
        self._touch(rid)
        tbl = self.tables.setdefault(rid, [])
        assert not tbl, "prefix blocks attach before private pages"
        for b in blocks:
            tbl.extend(self.block_ids[b])
        self.shared[rid] = len(tbl)
        if not tbl:
            del self.tables[rid]

    def detach_prefix(self, rid: int, blocks) -> None:
        super().detach_prefix(rid, blocks)
        self._touch(rid)
        self.tables.pop(rid, None)
        self.shared.pop(rid, None)

    def release(self, rid: int, have: int, blocks) -> None:
        self._resize([rid], [have], [0], -int(have))
        if self.cache is not None and len(blocks):
            self.cache.release(blocks)
        self._touch(rid)
        self.tables.pop(rid, None)
        self.shared.pop(rid, None)

    def publish_prefix(self, rid: int, blocks) -> int:
        bp = self.cache.block_pages
        tbl = self.tables[rid]
        start = len(tbl) - self._private_count(rid)  # first private page
        dup = self.cache.publish(blocks)
        for i, (b, d) in enumerate(zip(blocks, dup)):
            mine = tbl[start + i * bp: start + (i + 1) * bp]
            if d:  # computed twice: keep the cached copy, free ours
                self._touch(rid)
                self._give_back(mine)
                tbl[start + i * bp: start + (i + 1) * bp] = self.block_ids[b]
            else:
                self.block_ids[b] = list(mine)
        moved = len(blocks) * bp
        self.private -= moved
        self.shared[rid] = self.shared.get(rid, 0) + moved
        return moved

    def take_freed(self) -> np.ndarray:
        out = np.asarray(self.freed, np.int64)
        self.freed = []
        return out

    def _private_count(self, rid: int) -> int:
        """Private pages = the table minus the prefix pages at its front."""
        return len(self.tables.get(rid, ())) - self.shared.get(rid, 0)

    def check(self) -> None:
        """Every page is free, private to exactly one request, or in exactly one cached block."""
        seen = list(self.free_ids)
        for b, ids in self.block_ids.items():
            seen += ids
        for rid, tbl in self.tables.items():
            seen += tbl[self.shared.get(rid, 0):]
        assert sorted(seen) == list(range(self.capacity)), "a page is lost or owned twice"
        assert len(self.free_ids) == self.free(), (len(self.free_ids), self.free())
