"""KV-cache pages: a pool with a fixed capacity and a prefix cache of shared prompt blocks.

A request holds `ceil(tokens / page_size)` private pages for its prompt, committed and provisional
(drafted) tokens, less the prompt blocks it shares through the prefix cache. Prefix blocks
(Mooncake's `hash_ids`, `block_size` tokens each) stay cached after their last user finishes, and
are evicted least-recently-used, only when unreferenced, when pages run short.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
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

    def acquire(self, blocks, count_stats: bool = True) -> int:
        """Reference the cached leading blocks of `blocks`; returns how many were hits."""
        hits = self.match(blocks)
        for b in blocks[:hits]:
            if self.refs[b] == 0:
                self.lru.pop(b, None)
            self.refs[b] += 1
        if count_stats:
            self.lookups += 1
            self.hit_blocks += hits
            self.queried_blocks += len(blocks)
        return hits

    def insert(self, blocks) -> int:
        """Add (and reference) blocks not yet cached; returns the pages newly taken."""
        new = 0
        for b in blocks:
            if b in self.refs:
                continue
            self.refs[b] = 1
            new += 1
        return new * self.block_pages

    def count_lookup(self, hits: int, queried: int) -> None:
        """An admission's lookup: `hits` leading blocks found of `queried` full prompt blocks."""
        self.lookups += 1
        self.hit_blocks += hits
        self.queried_blocks += queried

    def publish(self, blocks) -> None:
        """A prompt's full blocks, now computed, become shared: referenced by the request that
        computed them (blocks already cached, e.g. computed meanwhile by another, gain a reference)."""
        refs, lru = self.refs, self.lru
        for b in blocks:
            if b in refs:
                if refs[b] == 0:
                    lru.pop(b, None)
                refs[b] += 1
            else:
                refs[b] = 1

    def release(self, blocks) -> None:
        for b in blocks:
            r = self.refs.get(b)
            if r is None:
                continue
            self.refs[b] = r - 1
            if r == 1:
                self.lru[b] = None

    def evict(self, pages_needed: int) -> int:
        """Evict unreferenced blocks, oldest first, until `pages_needed` are freed; returns freed."""
        freed = 0
        while freed < pages_needed and self.lru:
            b, _ = self.lru.popitem(last=False)
            del self.refs[b]
            freed += self.block_pages
        return freed

    def evictable_pages(self) -> int:
        return len(self.lru) * self.block_pages


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

    def reserve(self, pages: int) -> bool:
        """Take `pages` private pages, evicting cached blocks if needed; False if impossible."""
        if pages <= 0:
            self.private += pages
            return True
        short = pages - self.free()
        if short > 0:
            if not self.cache or self.cache.evictable_pages() < short:
                return False
            self.cache.evict(short)
        self.private += pages
        self.peak = max(self.peak, self.used)
        return True

    def adjust(self, pages: int) -> None:
        """Change the private pages held by `pages` without eviction: shrinking, or growing by what
        the caller has checked fits (`free()`; then `track_peak()`)."""
        self.private += pages

    def track_peak(self) -> None:
        if self.used > self.peak:
            self.peak = self.used

    def pages_for(self, tokens: int) -> int:
        return -(-int(tokens) // self.page_size)
