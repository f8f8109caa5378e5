//! `verify-server`: `GET {url}/v1/models` as seen from the host (through an SSH port forward to
//! the host's loopback), polling until it answers or `wait` runs out; then what the server tells
//! about itself (engine, version, launch arguments), kept in the step's details in the manifest.

use anyhow::{Context, Result};
use serde_json::json;

use super::server_probe::{server_facts, smoke, wait_until_up};
use super::{HostCtx, StepOutcome};
use crate::config::steps::verify_server::VerifyServerPlan;

pub async fn run(ctx: &mut HostCtx, plan: &VerifyServerPlan) -> Result<StepOutcome> {
    let (url, model, wait) = (&plan.url, plan.model.as_deref(), plan.wait);
    let api_key = api_key(plan.api_key_env.as_deref())?;
    let endpoint = ctx.transport.http_endpoint(url).await?;
    let (info, waited) = match wait_until_up(&endpoint, wait, api_key.as_deref(), &|| None).await {
        Ok(up) => up,
        Err(e) => {
            return Ok(StepOutcome::failed(
                format!("{url} on {}: {e:#}", ctx.host),
                json!({ "url": url }),
            ))
        }
    };
    let mut details = json!({
        "url": url,
        "models": info.models,
        "max_model_len": info.max_model_len,
        "waited_seconds": waited.as_secs_f64(),
        "reply": info.reply,
    });
    let facts = server_facts(&endpoint, api_key.as_deref(), &info.reply).await;
    details["server_facts"] = serde_json::to_value(facts)?;
    if let Some(model) = model {
        if !info.models.iter().any(|m| m == model) {
            let served = if info.models.is_empty() {
                "nothing".to_string()
            } else {
                info.models.join(", ")
            };
            return Ok(StepOutcome::failed(
                format!(
                    "model `{model}` is not served at {url} on {}; it serves: {served}",
                    ctx.host
                ),
                details,
            ));
        }
    }
    if plan.smoke {
        let model = model
            .or(info.models.first().map(String::as_str))
            .unwrap_or_default();
        match smoke(&endpoint, model, 8, api_key.as_deref()).await {
            Ok(reply) => details["smoke"] = reply,
            Err(e) => return Ok(StepOutcome::failed(format!("{e:#}"), details)),
        }
    }
    ctx.checked_server = Some(super::CheckedServer {
        url: url.clone(),
        api_key,
        down_for: plan.down_for,
    });
    let mut outcome = StepOutcome::ok(details);
    outcome.provides.insert("server".into(), info.as_var(url));
    Ok(outcome)
}

/// The API key comes from the environment only, so it never sits in a playbook, log or manifest.
pub fn api_key(env_name: Option<&str>) -> Result<Option<String>> {
    env_name
        .map(|name| {
            std::env::var(name).with_context(|| {
                format!("api_key_env names `{name}`, but that environment variable is not set")
            })
        })
        .transpose()
}
