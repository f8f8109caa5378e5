//! How a command ends, as the contract's exit codes say: 0 success, 1 something that ran failed,
//! 2 invalid input (nothing was run). Every command returns an [`Exit`]; errors that mean bad
//! input are [`Invalid`]. A ground floor: it imports nothing of rigrun.

use std::process::ExitCode;

/// The outcome of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked for was done (and, for `bench`, every level was valid).
    Ok,
    /// Something that ran failed: a step, a host, an invalid level, a missed reference; or a
    /// run measured nothing on a host (its sweep points ran and printed no record).
    Failed,
    /// The input was wrong; nothing was run.
    Invalid,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Invalid => 2,
        }
    }

    /// `Ok` when `ok`, else `Failed`.
    pub fn ok_if(ok: bool) -> Exit {
        if ok {
            Exit::Ok
        } else {
            Exit::Failed
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Bad input: printed as is, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);
