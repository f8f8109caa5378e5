//! `--reset-cache`: the server's prefix cache emptied before each level's measured requests,
//! through vLLM's `POST /reset_prefix_cache` or SGLang's `POST /flush_cache`, and the cache state
//! every record carries (`"cache": "reset"` or `"warm"`).

use super::client::Client;

/// The reset routes, tried in this order: vLLM's, then SGLang's.
const ROUTES: [(&str, &str); 2] = [("/reset_prefix_cache", "vLLM"), ("/flush_cache", "SGLang")];

/// The server's reset route, found by [`CacheReset::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheReset {
    route: &'static str,
}

/// The prefix cache's state when a level's measured requests began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheState {
    /// Not reset: whatever earlier requests (the warm-up's too) left in it.
    Warm,
    /// Emptied after the warm-up.
    Reset,
    /// A reset was asked for and failed (why): the cache was warm, and the level is invalid.
    NotReset(String),
}

impl CacheState {
    /// The record's `cache` value.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reset => "reset",
            Self::Warm | Self::NotReset(_) => "warm",
        }
    }

    /// The problem a failed reset makes of the level.
    pub fn problem(&self) -> Option<String> {
        match self {
            Self::NotReset(why) => Some(format!("the prefix cache was not reset ({why})")),
            _ => None,
        }
    }
}

impl CacheReset {
    /// Finds the server's reset route by resetting through vLLM's, then SGLang's. A server
    /// with neither (both answer 404 or 405) is an error saying what to do; any other failure
    /// is an error too, never a silent skip.
    pub async fn find(client: &Client) -> Result<Self, String> {
        let mut absent = Vec::new();
        for (route, server) in ROUTES {
            match client.post_empty(route).await {
                Ok((status, _)) if (200..300).contains(&status) => return Ok(Self { route }),
                Ok((404 | 405, _)) => absent.push(format!("{server}'s POST {route}")),
                Ok((status, body)) => {
                    return Err(format!(
                        "--reset-cache: {}{route} ({server}'s prefix-cache reset) answered HTTP \
                         {status}: {body}",
                        client.base()
                    ))
                }
                Err(why) => return Err(format!("--reset-cache: {why}")),
            }
        }
        Err(format!(
            "--reset-cache: {} serves neither {}, so its prefix cache cannot be emptied between \
             levels; for vLLM, start it with VLLM_SERVER_DEV_MODE=1 (which serves \
             /reset_prefix_cache), or leave out --reset-cache (the records then say \"cache\": \
             \"warm\")",
            client.base(),
            absent.join(" nor ")
        ))
    }

    /// Empties the cache now; the state the level's records then carry.
    pub async fn reset(self, client: &Client) -> CacheState {
        match client.post_empty(self.route).await {
            Ok((status, _)) if (200..300).contains(&status) => CacheState::Reset,
            Ok((status, body)) => {
                CacheState::NotReset(format!("POST {} answered HTTP {status}: {body}", self.route))
            }
            Err(why) => CacheState::NotReset(why),
        }
    }
}

/// The state of the cache before a level's measured requests: reset through `reset` if given.
pub async fn before_measuring(reset: Option<CacheReset>, client: &Client) -> CacheState {
    match reset {
        Some(reset) => reset.reset(client).await,
        None => CacheState::Warm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_say_reset_only_when_it_was() {
        assert_eq!(CacheState::Reset.name(), "reset");
        assert_eq!(CacheState::Warm.name(), "warm");
        let failed = CacheState::NotReset("HTTP 500".into());
        assert_eq!(failed.name(), "warm");
        assert!(failed.problem().unwrap().contains("HTTP 500"));
        assert_eq!(CacheState::Reset.problem(), None);
    }
}
