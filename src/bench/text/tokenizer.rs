//! The served model's tokenizer, asked through the server's own tokenize endpoint: vLLM's and
//! SGLang's `POST /tokenize {"model", "prompt"}` (→ `{"tokens", "count"}`), or llama.cpp's
//! `POST /tokenize {"content"}` (→ `{"tokens"}`). Found by asking once in each form (a form is
//! understood when a sentence counts at least one token: llama.cpp answers vLLM's form with an
//! empty list); a server with neither is refused with what to use instead.
//!
//! Three counts serve the text workload: the prompt as `/v1/completions` counts it (special
//! tokens such as a BOS included, as the server adds them to a text prompt), the text alone (no
//! special tokens: a chat message's content), and a chat of one user message with the chat
//! template (what `/v1/chat/completions` counts; vLLM's form only — SGLang's and llama.cpp's
//! tokenize endpoints apply no template).

use serde_json::{json, Value};

use super::super::client::Api;
use super::super::client::Client;

/// The probe text.
const PROBE: &str = "It is a truth universally acknowledged.";

/// The endpoint's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// vLLM's and SGLang's: `{"model", "prompt", "add_special_tokens"}`, `{"model", "messages"}`.
    Engine,
    /// llama.cpp's: `{"content", "add_special"}`.
    Llama,
}

/// The server's tokenizer, as its endpoint answers.
pub struct ServerTokenizer<'a> {
    client: &'a Client,
    model: String,
    form: Form,
}

impl<'a> ServerTokenizer<'a> {
    /// Finds the server's tokenize endpoint (vLLM's or SGLang's form, else llama.cpp's); for
    /// `--api chat`, also that it counts a chat with its template.
    pub async fn find(client: &'a Client, model: &str, api: Api) -> Result<Self, String> {
        let mut tokenizer = Self {
            client,
            model: model.to_string(),
            form: Form::Engine,
        };
        let mut answers = Vec::new();
        for form in [Form::Engine, Form::Llama] {
            tokenizer.form = form;
            // llama.cpp answers vLLM's form with an empty list (it reads only `content`): a
            // form is understood when the probe counts at least one token.
            match tokenizer.ask(tokenizer.prompt_body(PROBE, false)).await {
                Ok(0) => answers.push("HTTP 200 but no tokens for a sentence".to_string()),
                Ok(_) => return tokenizer.for_api(api).await,
                Err(why) => answers.push(why),
            }
        }
        Err(format!(
            "--workload text cuts each prompt to its exact length with the server's own \
             tokenizer, but {} serves no tokenize endpoint (vLLM's or SGLang's POST /tokenize \
             {{\"model\", \"prompt\"}}: {}; llama.cpp's POST /tokenize {{\"content\"}}: {}); \
             use --workload random or catid (token ids: exact lengths with --api completions), \
             or a prompts file",
            client.base(),
            answers[0],
            answers[1]
        ))
    }

    /// Checks what `api` needs: a chat's count with the template (vLLM's form only).
    async fn for_api(self, api: Api) -> Result<Self, String> {
        if api == Api::Completions {
            return Ok(self);
        }
        let template = match self.form {
            Form::Engine => match self.ask(self.chat_body(PROBE)).await {
                Ok(0) => Err("HTTP 200 but no tokens for a chat".to_string()),
                Ok(_) => Ok(()),
                Err(why) => Err(why),
            },
            Form::Llama => Err("llama.cpp's form takes no messages".to_string()),
        };
        match template {
            Ok(()) => Ok(self),
            Err(why) => Err(format!(
                "--workload text --api chat: {}'s tokenize endpoint does not count a chat with \
                 its template ({why}), so the prompt tokens each request should report are not \
                 known; use --api completions (the text as the prompt), or a server whose \
                 POST /tokenize takes {{\"messages\"}} (vLLM)",
                self.client.base()
            )),
        }
    }

    /// Where the counts come from, for the records.
    pub fn source(&self) -> &'static str {
        match self.form {
            Form::Engine => "server POST /tokenize (vLLM/SGLang form)",
            Form::Llama => "server POST /tokenize (llama.cpp form)",
        }
    }

    /// Tokens of `text` sent as a `/v1/completions` prompt (special tokens included).
    pub async fn count_prompt(&self, text: &str) -> Result<u64, String> {
        self.ask(self.prompt_body(text, true)).await
    }

    /// Tokens of `text` alone (no special tokens): a chat message's content.
    pub async fn count_text(&self, text: &str) -> Result<u64, String> {
        self.ask(self.prompt_body(text, false)).await
    }

    /// Tokens of a chat of one user message saying `text`, with the template and the reply's
    /// header: what `/v1/chat/completions` reports as `usage.prompt_tokens`.
    pub async fn count_chat(&self, text: &str) -> Result<u64, String> {
        self.ask(self.chat_body(text)).await
    }

    fn prompt_body(&self, text: &str, special: bool) -> Value {
        match self.form {
            Form::Engine => {
                json!({"model": self.model, "prompt": text, "add_special_tokens": special})
            }
            Form::Llama => json!({"content": text, "add_special": special}),
        }
    }

    fn chat_body(&self, text: &str) -> Value {
        json!({"model": self.model, "messages": [{"role": "user", "content": text}]})
    }

    /// Posts `body` to `/tokenize`; the number of tokens in the answer.
    async fn ask(&self, body: Value) -> Result<u64, String> {
        let (status, reply) = self.client.post_json("/tokenize", &body).await?;
        let excerpt = crate::http_client::excerpt(&reply);
        if !(200..300).contains(&status) {
            return Err(format!("HTTP {status}: {excerpt}"));
        }
        let value: Value =
            serde_json::from_slice(&reply).map_err(|_| format!("HTTP {status} but not JSON: {excerpt}"))?;
        token_count(&value).ok_or_else(|| format!("HTTP {status} but no token list: {excerpt}"))
    }
}

/// The length of `tokens` (a list of ids), else `count`.
fn token_count(reply: &Value) -> Option<u64> {
    match reply.get("tokens") {
        Some(Value::Array(ids)) if ids.iter().all(|id| id.is_u64() || id.is_object()) => {
            Some(ids.len() as u64)
        }
        _ => reply.get("count")?.as_u64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_token_list_else_count() {
        assert_eq!(token_count(&json!({"tokens": [1, 2, 3], "count": 3})), Some(3));
        assert_eq!(token_count(&json!({"tokens": []})), Some(0));
        // llama.cpp's with_pieces form lists objects.
        assert_eq!(
            token_count(&json!({"tokens": [{"id": 1, "piece": "a"}]})),
            Some(1)
        );
        assert_eq!(token_count(&json!({"count": 7})), Some(7));
        assert_eq!(token_count(&json!({"tokens": ["a"]})), None);
        assert_eq!(token_count(&json!({"detail": "Not Found"})), None);
    }
}
