//! Merging the answers of a request's parts: per-shard answers of a split request go back
//! in the order of its keys; answers of a request every shard ran are combined.

use bytes::Bytes;
use firn_model::{Answer, FirnError, Response, Staleness, Written};

use super::Pending;

/// How a request's part answers combine.
#[derive(Clone, Copy, Debug)]
pub(super) enum Merge {
    /// Values, back in the order of the request's keys.
    Values,
    /// What each write did, back in the order of the request's keys.
    Written,
    /// Counts, summed.
    Count,
    /// Pages of keys from every shard, cut where every shard's page is complete.
    Scan,
    /// Versions removed, summed (FLUSHALL answers `Done` from each shard).
    Truncated,
}

impl Merge {
    /// Puts per-shard answers of a split request of `n` keys back in the order of its keys.
    pub(super) async fn split(
        self,
        parts: Vec<(Pending, Vec<usize>)>,
        n: usize,
    ) -> Result<Answer, FirnError> {
        let mut values = vec![None; n];
        let mut written: Vec<Option<Written>> = vec![None; n];
        let mut count = 0u64;
        let mut seen = Seen::default();
        for (pending, positions) in parts {
            match seen.take(pending.await?) {
                Response::Values(vs) => {
                    for (v, i) in vs.into_iter().zip(positions) {
                        values[i] = v;
                    }
                }
                Response::Written(ws) => {
                    for (w, i) in ws.into_iter().zip(positions) {
                        written[i] = Some(w);
                    }
                }
                Response::Count(c) => count += c,
                other => {
                    return Err(FirnError::Internal(format!(
                        "unexpected part answer {other:?}"
                    )));
                }
            }
        }
        let merged = match self {
            Merge::Values => Response::Values(values),
            Merge::Count => Response::Count(count),
            _ => Response::Written(written.into_iter().flatten().collect()),
        };
        Ok(seen.answer(merged))
    }

    /// Combines the answers of a request every shard ran.
    pub(super) async fn all(self, parts: Vec<Pending>) -> Result<Answer, FirnError> {
        let mut seen = Seen::default();
        let mut answers = Vec::with_capacity(parts.len());
        for p in parts {
            answers.push(seen.take(p.await?));
        }
        let merged = match self {
            Merge::Scan => merge_scan(answers),
            Merge::Count => Response::Count(
                answers
                    .iter()
                    .map(|a| if let Response::Count(c) = a { *c } else { 0 })
                    .sum(),
            ),
            Merge::Truncated => match answers.first() {
                Some(Response::Truncated { .. }) => Response::Truncated {
                    versions_removed: answers
                        .iter()
                        .map(|a| match a {
                            Response::Truncated { versions_removed } => *versions_removed,
                            _ => 0,
                        })
                        .sum(),
                },
                _ => Response::Done,
            },
            Merge::Values | Merge::Written => {
                return Err(FirnError::Internal(format!(
                    "{self:?} merges a split request, not one every shard ran"
                )));
            }
        };
        Ok(seen.answer(merged))
    }
}

/// What the parts observed, and the weakest staleness bound among them.
#[derive(Default)]
struct Seen {
    observed: Option<firn_model::CommitTs>,
    staleness: Option<Staleness>,
    unbounded: bool,
}

impl Seen {
    fn take(&mut self, answer: Answer) -> Response {
        self.observed = self.observed.max(answer.observed);
        match (answer.staleness, self.staleness) {
            (None, _) => self.unbounded = true,
            (Some(s), None) => self.staleness = Some(s),
            (Some(s), Some(mine)) => {
                self.staleness = Some(Staleness {
                    applied_through: s.applied_through.min(mine.applied_through),
                    at_most_us: s.at_most_us.max(mine.at_most_us),
                })
            }
        }
        answer.response
    }

    fn answer(self, response: Response) -> Answer {
        Answer {
            response,
            observed: self.observed,
            // A bound holds for the whole only if every part had one.
            staleness: self.staleness.filter(|_| !self.unbounded),
        }
    }
}

/// Each shard returned a page after the same cursor. Keys up to the smallest cursor a shard
/// stopped at are complete; later ones are returned next time.
fn merge_scan(answers: Vec<Response>) -> Response {
    let mut keys = Vec::new();
    let mut stop: Option<Bytes> = None;
    for a in answers {
        if let Response::Scan {
            keys: k,
            next_cursor,
        } = a
        {
            keys.extend(k);
            if let Some(c) = next_cursor {
                stop = Some(stop.map_or(c.clone(), |s| s.min(c)));
            }
        }
    }
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(s) = &stop {
        keys.retain(|(k, _)| k.as_bytes() <= &s[..]);
    }
    Response::Scan {
        keys,
        next_cursor: stop,
    }
}
