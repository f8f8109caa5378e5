//! Prefix caching as vLLM does it: prompts are cut into fixed-size blocks, each block is keyed
//! by a hash chained over every token before it, and a new prompt skips the prefill of its
//! longest run of leading blocks already computed.
//!
//! Simplification: cached blocks do not count against the KV capacity of running requests
//! (real servers keep them in the free part of the pool); the cache holds at most as many
//! blocks as the KV cache has room for and evicts the least recently used.

use std::collections::{BTreeMap, HashMap};

use super::tokens::mix;

/// Chained hashes of the full `block_tokens`-sized blocks of `tokens`.
pub fn block_hashes(tokens: &[u32], block_tokens: u32) -> Vec<u64> {
    let mut chain = 0u64;
    tokens
        .chunks_exact(block_tokens.max(1) as usize)
        .map(|block| {
            chain = block.iter().fold(mix(chain), |acc, &t| mix(acc ^ u64::from(t)));
            chain
        })
        .collect()
}

/// The set of computed blocks, least recently used evicted first.
#[derive(Debug)]
pub struct PrefixCache {
    block_tokens: u32,
    capacity_blocks: usize,
    /// Block hash → the tick it was last used.
    last_use: HashMap<u64, u64>,
    /// Tick → block hash, oldest first.
    by_age: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    /// An empty cache of `capacity_tokens` worth of `block_tokens`-sized blocks.
    pub fn new(block_tokens: u32, capacity_tokens: u64) -> Self {
        let block_tokens = block_tokens.max(1);
        Self {
            block_tokens,
            capacity_blocks: (capacity_tokens / u64::from(block_tokens)).max(1) as usize,
            last_use: HashMap::new(),
            by_age: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Tokens of the leading blocks of `hashes` found in the cache (marking them used).
    pub fn lookup(&mut self, hashes: &[u64]) -> u64 {
        let hits = hashes
            .iter()
            .take_while(|h| self.last_use.contains_key(h))
            .count();
        for &hash in &hashes[..hits] {
            self.touch(hash);
        }
        hits as u64 * u64::from(self.block_tokens)
    }

    /// Prompt tokens a prompt of `prompt_tokens` with block `hashes` gets from the cache. As in
    /// vLLM, the last prompt token is always computed and hits are whole blocks, so a fully
    /// cached prompt of exactly k blocks recomputes its last block.
    pub fn lookup_prompt(&mut self, hashes: &[u64], prompt_tokens: u32) -> u64 {
        let usable = (prompt_tokens.saturating_sub(1) / self.block_tokens) as usize;
        self.lookup(&hashes[..usable.min(hashes.len())])
    }

    /// Records `hashes` as computed, evicting the oldest blocks beyond capacity.
    pub fn insert(&mut self, hashes: &[u64]) {
        for &hash in hashes {
            self.touch(hash);
        }
        while self.last_use.len() > self.capacity_blocks {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.last_use.remove(&oldest);
        }
    }

    /// Forgets every block, as vLLM's `/reset_prefix_cache` and SGLang's `/flush_cache` do.
    pub fn clear(&mut self) {
        self.last_use.clear();
        self.by_age.clear();
    }

    /// Marks `hash` as used now.
    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(old) = self.last_use.insert(hash, self.tick) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.tick, hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_chain_over_the_prefix() {
        let a = block_hashes(&[1, 2, 3, 4, 5], 2);
        assert_eq!(a.len(), 2);
        let b = block_hashes(&[1, 2, 9, 9], 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // The same block after a different prefix is a different block.
        assert_ne!(block_hashes(&[7, 7, 3, 4], 2)[1], a[1]);
    }

    #[test]
    fn finds_the_longest_cached_prefix() {
        let mut cache = PrefixCache::new(2, 100);
        let hashes = block_hashes(&[1, 2, 3, 4, 5, 6], 2);
        assert_eq!(cache.lookup(&hashes), 0);
        cache.insert(&hashes[..2]);
        assert_eq!(cache.lookup(&hashes), 4);
        let other = block_hashes(&[1, 2, 8, 8], 2);
        assert_eq!(cache.lookup(&other), 2);
    }

    #[test]
    fn a_prompt_hit_leaves_the_last_token_and_stays_block_aligned() {
        let mut cache = PrefixCache::new(4, 100);
        let exact = block_hashes(&[1; 8], 4);
        cache.insert(&exact);
        assert_eq!(cache.lookup_prompt(&exact, 8), 4);
        let longer = block_hashes(&[1; 9], 4);
        assert_eq!(cache.lookup_prompt(&longer, 9), 8);
        assert_eq!(cache.lookup_prompt(&exact[..1], 4), 0);
    }

    #[test]
    fn clearing_forgets_every_block() {
        let mut cache = PrefixCache::new(2, 100);
        let hashes = block_hashes(&[1, 2, 3, 4, 5], 2);
        cache.insert(&hashes);
        assert_eq!(cache.lookup_prompt(&hashes, 5), 4);
        cache.clear();
        assert_eq!(cache.lookup_prompt(&hashes, 5), 0);
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut cache = PrefixCache::new(1, 2);
        cache.insert(&[10, 11]);
        assert_eq!(cache.lookup(&[10]), 1);
        cache.insert(&[12]);
        assert_eq!(cache.lookup(&[10]), 1);
        assert_eq!(cache.lookup(&[11]), 0);
        assert_eq!(cache.lookup(&[12]), 1);
    }
}
