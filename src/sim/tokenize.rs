//! The tokenize endpoint, `POST /tokenize`, in the three servers' forms, with the sim's token
//! rule (`tokens.rs`), so a client that sizes its prompts with it gets what usage counts:
//!
//! - vLLM's and SGLang's: `{"model", "prompt"}` (SGLang also a list of strings) or
//!   `{"model", "messages"}` → `{"count", "max_model_len", "tokens"}` (vLLM adds `token_strs`,
//!   null unless asked for; the sim never fills it);
//! - llama.cpp's: `{"content"}` → `{"tokens"}` (no BOS: its `add_special` defaults to false).
//!
//! vLLM's `add_special_tokens` and llama.cpp's `add_special` are taken and change nothing: the
//! rule has no special tokens in a prompt, so a text counts the same with or without them (and
//! as its completion's usage counts it), which `rigrun bench --workload text` relies on.
//!
//! They share the path, so the body decides: `content` without `prompt` or `messages` is
//! llama.cpp's; otherwise the `--metrics-names` flavour shapes the reply.

use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{self, ApiError, Message, ServedModel};
use super::metrics_endpoint::Names;
use super::tokens;

/// A vLLM or SGLang tokenize body.
#[derive(Debug, Deserialize)]
struct EngineRequest {
    model: Option<String>,
    prompt: Option<Prompt>,
    messages: Option<Vec<Message>>,
}

/// `prompt`: one text, or (SGLang) several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// llama.cpp's tokenize body.
#[derive(Debug, Deserialize)]
struct LlamaRequest {
    content: String,
}

/// The reply to a tokenize `body`, in the form its shape and `names` call for.
pub fn reply(body: &[u8], served: &ServedModel, names: Names) -> Result<Value, ApiError> {
    let value: Value = api::from_json(body)?;
    let is_llama =
        value.get("content").is_some() && value.get("prompt").is_none() && value.get("messages").is_none();
    if is_llama {
        let request: LlamaRequest = api::from_json(body)?;
        return Ok(json!({ "tokens": tokens::text_ids(&request.content) }));
    }
    let request: EngineRequest = api::from_json(body)?;
    served.check(request.model.as_deref())?;
    let ids = match (request.prompt, request.messages) {
        (Some(Prompt::One(text)), None) => tokens::prompt_ids(&text),
        (Some(Prompt::Many(texts)), None) if names == Names::Sglang => {
            let all: Vec<Vec<u32>> = texts.iter().map(|t| tokens::prompt_ids(t)).collect();
            let counts: Vec<usize> = all.iter().map(Vec::len).collect();
            return Ok(json!({
                "tokens": all, "count": counts, "max_model_len": served.max_model_len,
            }));
        }
        (None, Some(messages)) if !messages.is_empty() => api::chat_prompt_ids(&messages),
        _ => {
            return Err(ApiError::bad_request(
                "give either `prompt` (a string) or `messages` (a non-empty list), or \
                 llama.cpp's `content`",
            ))
        }
    };
    let mut reply = json!({
        "count": ids.len(), "max_model_len": served.max_model_len, "tokens": ids,
    });
    if names == Names::Vllm {
        reply["token_strs"] = Value::Null;
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::super::api::tests::served;
    use super::*;

    fn ask(body: &str, names: Names) -> Result<Value, ApiError> {
        reply(body.as_bytes(), &served(), names)
    }

    /// The counts are what usage counts for the same text: a completion prompt, a chat.
    #[test]
    fn counts_as_usage_counts() {
        let text = "The quick brown fox jumps.";
        let r = ask(&json!({"model": "m", "prompt": text}).to_string(), Names::Vllm).unwrap();
        assert_eq!(r["count"], tokens::prompt_ids(text).len());
        assert_eq!(r["tokens"], json!(tokens::prompt_ids(text)));
        assert_eq!(r["max_model_len"], 100);
        assert!(r["token_strs"].is_null());
        let chat = r#"{"messages":[{"role":"user","content":"abcdefgh"}]}"#;
        let generation = api::parse_chat(chat.as_bytes(), &served()).unwrap();
        let r = ask(chat, Names::Sglang).unwrap();
        assert_eq!(r["tokens"], json!(generation.prompts[0].ids));
        assert_eq!(r["count"], 5 + 2 + 3);
        assert!(r.get("token_strs").is_none());
    }

    /// `rigrun bench --workload text` asks with and without special tokens; the rule has none,
    /// so both count the same (as the completion's usage does).
    #[test]
    fn special_token_flags_are_taken_and_change_nothing() {
        let text = "It is a truth universally acknowledged";
        let n = tokens::prompt_ids(text).len();
        for body in [
            json!({"model": "m", "prompt": text, "add_special_tokens": true}),
            json!({"model": "m", "prompt": text, "add_special_tokens": false}),
            json!({"content": text, "add_special": true}),
            json!({"content": text, "add_special": false}),
        ] {
            let r = ask(&body.to_string(), Names::Vllm).unwrap();
            assert_eq!(r["tokens"].as_array().unwrap().len(), n, "{body}");
        }
    }

    #[test]
    fn llama_cpp_bodies_get_llama_cpp_replies() {
        let r = ask(r#"{"content":"abcdefghi"}"#, Names::Vllm).unwrap();
        assert_eq!(r, json!({"tokens": tokens::text_ids("abcdefghi")}));
        assert_eq!(r["tokens"].as_array().unwrap().len(), 3);
        assert_eq!(
            ask(r#"{"content":""}"#, Names::Sglang).unwrap(),
            json!({"tokens": []})
        );
    }

    #[test]
    fn sglang_takes_a_batch_and_bad_bodies_are_400() {
        let r = ask(r#"{"prompt":["abcd","abcde"]}"#, Names::Sglang).unwrap();
        assert_eq!(r["count"], json!([1, 2]));
        for body in [
            r#"{"prompt":["abcd"]}"#,
            r#"{"messages":[]}"#,
            r#"{}"#,
            r#"{"prompt":5}"#,
            r#"{"content":5}"#,
        ] {
            let err = ask(body, Names::Vllm).unwrap_err();
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
        }
        let err = ask(r#"{"model":"x","prompt":"a"}"#, Names::Vllm).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::NOT_FOUND);
    }
}
