//! A versioned register: Firn's per-key semantics (put, get, conditional put), as a
//! sequential model for [`crate::check`].

/// The register's state: its latest version (0: never written) and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Register {
    pub version: u64,
    pub value: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    Put(String),
    Get,
    /// Put only if the latest version is this one.
    CPut {
        if_version: u64,
        value: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOut {
    /// A write succeeded and made this version.
    Written(u64),
    /// A read saw this value (and version).
    Read { version: u64, value: Option<String> },
    /// A conditional write failed; the current version was this.
    Conflict(u64),
}

impl crate::Model for Register {
    type Op = RegisterOp;
    type Out = RegisterOut;

    fn step(&self, op: &RegisterOp, out: Option<&RegisterOut>) -> Option<Self> {
        let written = |value: &String| Register {
            version: self.version + 1,
            value: Some(value.clone()),
        };
        match (op, out) {
            (RegisterOp::Put(v), None) => Some(written(v)),
            (RegisterOp::Put(v), Some(RegisterOut::Written(n))) if *n == self.version + 1 => {
                Some(written(v))
            }
            (RegisterOp::Get, None) => Some(self.clone()),
            (RegisterOp::Get, Some(RegisterOut::Read { version, value }))
                if *version == self.version && *value == self.value =>
            {
                Some(self.clone())
            }
            (RegisterOp::CPut { if_version, value }, None) => {
                Some(if *if_version == self.version {
                    written(value)
                } else {
                    self.clone()
                })
            }
            (RegisterOp::CPut { if_version, value }, Some(RegisterOut::Written(n)))
                if *if_version == self.version && *n == self.version + 1 =>
            {
                Some(written(value))
            }
            (RegisterOp::CPut { if_version, .. }, Some(RegisterOut::Conflict(current)))
                if *if_version != self.version && *current == self.version =>
            {
                Some(self.clone())
            }
            _ => None,
        }
    }
}
