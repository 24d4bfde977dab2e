//! A command's arguments, consumed front to back with typed accessors that produce the
//! user-facing error for each mistake.

use std::collections::VecDeque;

use bytes::Bytes;
use firn_model::time::{parse_micros, parse_read_time};
use firn_model::{CommitTs, FirnError, Key};

pub struct Args {
    /// The command name as the client sent it, for error messages.
    pub name: String,
    items: VecDeque<Bytes>,
}

impl Args {
    pub fn new(name: String, items: VecDeque<Bytes>) -> Self {
        Args { name, items }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn arity(&self) -> FirnError {
        FirnError::WrongArity(self.name.to_lowercase())
    }

    pub fn bytes(&mut self) -> Result<Bytes, FirnError> {
        self.items.pop_front().ok_or_else(|| self.arity())
    }

    pub fn text(&mut self) -> Result<String, FirnError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec())
            .map_err(|_| FirnError::BadArgument("argument is not valid UTF-8".into()))
    }

    /// The next argument upper-cased, for keywords.
    pub fn keyword(&mut self) -> Result<String, FirnError> {
        Ok(self.text()?.to_ascii_uppercase())
    }

    pub fn peek_keyword(&self) -> Option<String> {
        self.items
            .front()
            .map(|b| String::from_utf8_lossy(b).to_ascii_uppercase())
    }

    pub fn key(&mut self) -> Result<Key, FirnError> {
        Key::new(self.bytes()?)
    }

    pub fn u64(&mut self, what: &str) -> Result<u64, FirnError> {
        let t = self.text()?;
        t.parse::<u64>().map_err(|_| {
            FirnError::BadArgument(format!("{what} must be a non-negative integer, got '{t}'"))
        })
    }

    pub fn usize(&mut self, what: &str) -> Result<usize, FirnError> {
        Ok(usize::try_from(self.u64(what)?).unwrap_or(usize::MAX))
    }

    pub fn read_time(&mut self) -> Result<CommitTs, FirnError> {
        parse_read_time(&self.text()?)
    }

    pub fn micros(&mut self) -> Result<u64, FirnError> {
        parse_micros(&self.text()?)
    }

    pub fn rest(&mut self) -> Vec<Bytes> {
        self.items.drain(..).collect()
    }

    pub fn keys(&mut self) -> Result<Vec<Key>, FirnError> {
        if self.items.is_empty() {
            return Err(self.arity());
        }
        self.rest().into_iter().map(Key::new).collect()
    }

    /// Fails if arguments are left over.
    pub fn done(&self) -> Result<(), FirnError> {
        match self.items.front() {
            None => Ok(()),
            Some(extra) => Err(FirnError::BadArgument(format!(
                "unexpected argument '{}' for '{}'",
                String::from_utf8_lossy(extra),
                self.name.to_lowercase()
            ))),
        }
    }
}
