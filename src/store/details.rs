//! A step's details (or a server variant's startup) in run.json: whatever JSON the step wrote,
//! kept as it is, with the server's reply among them typed, so that readers find what a host's
//! server said of itself by its type rather than by the kind of step that asked.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value as Json;

use crate::facts::ServerReply;

/// The JSON a step wrote, and the [`ServerReply`] it holds, read once whenever the details are
/// made: from an event by the store, or from run.json by a reader. Serialized as the JSON alone,
/// so run.json keeps its shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    json: Json,
    server: Option<ServerReply>,
}

impl Details {
    /// What the host's server said of itself, when these details hold it (a `verify-server`
    /// step's, a server variant's startup).
    pub fn server(&self) -> Option<&ServerReply> {
        self.server.as_ref()
    }
}

impl From<Json> for Details {
    fn from(json: Json) -> Details {
        let server = ServerReply::within(&json);
        Details { json, server }
    }
}

impl std::ops::Deref for Details {
    type Target = Json;

    fn deref(&self) -> &Json {
        &self.json
    }
}

impl Serialize for Details {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Details, D::Error> {
        Json::deserialize(d).map(Details::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_read_and_write_as_the_json_they_hold() {
        let json = serde_json::json!({"models": ["m"], "max_model_len": 8, "reply": {"x": 1}});
        let details: Details = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(details.server().unwrap().max_model_len, Some(8));
        assert_eq!(serde_json::to_value(&details).unwrap(), json);
        assert_eq!(details["reply"]["x"], 1);
        assert_eq!(serde_json::to_string(&Details::default()).unwrap(), "null");
    }
}
