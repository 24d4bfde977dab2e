//! Merging the answers of a request's parts: per-shard answers of a split request go back
//! in the order of its keys; answers of a request every shard ran are combined.

use bytes::Bytes;
use firn_model::{Answer, FirnError, Response, Staleness, Written};

use super::Pending;

/// How a request's part answers combine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Merge {
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
    /// Keys, every shard's together.
    Keys,
}

impl Merge {
    /// Puts per-shard answers of a split request of `n` keys back in the order of its keys.
    pub(crate) async fn split(
        self,
        parts: Vec<(Pending, Vec<usize>)>,
        n: usize,
    ) -> Result<Answer, FirnError> {
        let (pendings, positions): (Vec<Pending>, Vec<Vec<usize>>) = parts.into_iter().unzip();
        let answers = self.answers(pendings).await?;
        let mut values = vec![None; n];
        let mut written: Vec<Option<Written>> = vec![None; n];
        let mut count = 0u64;
        let mut seen = Seen::default();
        for (answer, positions) in answers.into_iter().zip(positions) {
            match seen.take(answer) {
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
    pub(crate) async fn all(self, parts: Vec<Pending>) -> Result<Answer, FirnError> {
        let mut seen = Seen::default();
        let answers: Vec<Response> = self
            .answers(parts)
            .await?
            .into_iter()
            .map(|a| seen.take(a))
            .collect();
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
            Merge::Keys => Response::LeaseKeys(
                answers
                    .into_iter()
                    .flat_map(|a| match a {
                        Response::LeaseKeys(keys) => keys,
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
            Merge::Values | Merge::Written => {
                return Err(FirnError::Internal(format!(
                    "{self:?} merges a split request, not one every shard ran"
                )));
            }
        };
        Ok(seen.answer(merged))
    }

    /// Whether the parts are a write's (see [`write_parts`]).
    fn merges_writes(self) -> bool {
        matches!(self, Merge::Written | Merge::Truncated)
    }

    /// Every part's answer: for a read, the first error if any; for a write, as
    /// [`write_parts`] says.
    async fn answers(self, parts: Vec<Pending>) -> Result<Vec<Answer>, FirnError> {
        let answers = futures::future::join_all(parts).await;
        if self.merges_writes() {
            write_parts(answers)
        } else {
            answers.into_iter().collect()
        }
    }
}

/// The answers of a write's parts, each run on its own shard. A part refused for now
/// (`TRYAGAIN`, `CLUSTERDOWN`: nothing applied there) is the whole write's answer only when no other part
/// applied: `TRYAGAIN` tells the client to send the write again — and the node its client
/// reached sends it again itself (`Kernel::again_while_refused`) — which would apply the
/// applied parts a second time. Then the write is `UNCERTAIN`, saying how much of it
/// applied.
pub(crate) fn write_parts(
    answers: Vec<Result<Answer, FirnError>>,
) -> Result<Vec<Answer>, FirnError> {
    let n = answers.len();
    let applied = answers.iter().filter(|a| a.is_ok()).count();
    answers
        .into_iter()
        .map(|a| match a {
            Err(e @ (FirnError::TryAgain(_) | FirnError::Busy(_) | FirnError::Unavailable(_)))
                if applied > 0 =>
            {
                Err(FirnError::Indeterminate(format!(
                    "the write applied on {applied} of the {n} shards it spans and was refused \
                     on another ({e}); sending it again would apply those parts twice"
                )))
            }
            a => a,
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn written() -> Result<Answer, FirnError> {
        Ok(Answer::new(Response::Written(Vec::new())))
    }

    fn refused() -> Result<Answer, FirnError> {
        Err(FirnError::TryAgain(
            "this replica is not the leader of shard 1".into(),
        ))
    }

    /// `TRYAGAIN` promises nothing was applied: a write refused on one shard after another
    /// shard applied its part must not say it.
    #[test]
    fn a_write_refused_on_one_shard_after_another_applied_is_uncertain() {
        let e = write_parts(vec![written(), refused()]).unwrap_err();
        assert!(matches!(e, FirnError::Indeterminate(_)), "{e:?}");
        assert!(
            e.to_string().contains("applied on 1 of the 2 shards"),
            "{e}"
        );
        let e = write_parts(vec![refused(), written(), written()]).unwrap_err();
        assert!(
            e.to_string().contains("applied on 2 of the 3 shards"),
            "{e}"
        );
        // So with a node at its limit, or a shard without a leader: both say "retry".
        for e in [
            FirnError::Busy("node 2 is busy".into()),
            FirnError::Unavailable("no leader".into()),
        ] {
            let e = write_parts(vec![written(), Err(e)]).unwrap_err();
            assert!(matches!(e, FirnError::Indeterminate(_)), "{e:?}");
        }
    }

    #[test]
    fn a_write_refused_on_every_shard_it_spans_may_be_sent_again() {
        let e = write_parts(vec![refused(), refused()]).unwrap_err();
        assert!(matches!(e, FirnError::TryAgain(_)), "{e:?}");
        assert_eq!(write_parts(vec![written(), written()]).unwrap().len(), 2);
    }

    /// The parts are all awaited: a read's refusal stays `TRYAGAIN` (reading again is
    /// harmless), a split write's is `UNCERTAIN` once another part answered.
    #[tokio::test]
    async fn every_part_is_awaited_and_only_a_write_turns_a_refusal_uncertain() {
        let parts = || -> Vec<(Pending, Vec<usize>)> {
            vec![
                (super::super::ready(refused()), vec![0]),
                (super::super::ready(written()), vec![1]),
            ]
        };
        let read = Merge::Values.split(parts(), 2).await.unwrap_err();
        assert!(matches!(read, FirnError::TryAgain(_)), "{read:?}");
        let write = Merge::Written.split(parts(), 2).await.unwrap_err();
        assert!(matches!(write, FirnError::Indeterminate(_)), "{write:?}");
    }
}
