//! A transaction's steps split by shard, and the shards' answers put back together in the
//! order of the steps.

use std::collections::BTreeMap;

use firn_model::{
    Appended, CommitTs, Compare, FirnError, Key, KvRead, KvWrite, LogSeq, LogWrite, Response,
    TxnStep, Written,
};
use firn_raft::ShardId;

use crate::cluster::layout::ClusterLayout;
use crate::exec::plan::{placed, step_shards};

/// One shard's part: the compares of its keys, and its steps of each branch in the
/// transaction's order.
#[derive(Debug, Default)]
pub(super) struct Part {
    pub compares: Vec<Compare>,
    pub steps: Vec<TxnStep>,
    /// `Some` (maybe empty) exactly when the transaction has `otherwise` steps.
    pub otherwise: Option<Vec<TxnStep>>,
}

/// Where a step of the transaction ran: on one shard, or — a step of several keys whose
/// keys are in several shards (MGET, EXISTS, MSET, DEL) — as one step per shard, each with
/// the positions of its keys in the step.
#[derive(Debug)]
enum Ran {
    One(ShardId, usize),
    Split(Vec<(ShardId, usize, Vec<usize>)>, usize),
}

/// A transaction planned over the shards.
#[derive(Debug)]
pub(super) struct Split {
    pub parts: BTreeMap<ShardId, Part>,
    /// The shard of the first key written (of the first key, if nothing is written): its
    /// record decides the transaction.
    pub anchor: ShardId,
    /// Where each step of the transaction ran, and each of its `otherwise` steps.
    ran: Vec<Ran>,
    ran_otherwise: Option<Vec<Ran>>,
}

impl Split {
    pub(super) fn new(
        layout: &ClusterLayout,
        compares: Vec<Compare>,
        steps: Vec<TxnStep>,
        otherwise: Option<Vec<TxnStep>>,
    ) -> Split {
        let shard = |k: &Key| layout.shard_of_key(k.as_bytes());
        let shards = |s: &TxnStep| step_shards(layout, s);
        let every = || steps.iter().chain(otherwise.iter().flatten());
        let anchor = every()
            .filter(|s| s.writes())
            .chain(every())
            .flat_map(shards)
            .chain(compares.iter().map(|c| shard(&c.key)))
            .next()
            .unwrap_or(0);
        let mut parts: BTreeMap<ShardId, Part> = BTreeMap::new();
        let ran = place(&mut parts, steps, anchor, &shards, |p| &mut p.steps);
        let ran_otherwise = otherwise.map(|o| {
            place(&mut parts, o, anchor, &shards, |p| {
                p.otherwise.get_or_insert_with(Vec::new)
            })
        });
        for compare in compares {
            parts
                .entry(shard(&compare.key))
                .or_default()
                .compares
                .push(compare);
        }
        if ran_otherwise.is_some() {
            for part in parts.values_mut() {
                part.otherwise.get_or_insert_with(Vec::new);
            }
        }
        Split {
            parts,
            anchor,
            ran,
            ran_otherwise,
        }
    }

    /// Every step's answer (of the `otherwise` steps with `otherwise`), in the
    /// transaction's order, from each shard's answers (in its part's order) and the stamp
    /// it prepared at; what the steps wrote is stamped `at`.
    pub(super) fn answers(
        &self,
        otherwise: bool,
        mut by_shard: BTreeMap<ShardId, (CommitTs, Vec<Result<Response, FirnError>>)>,
        at: CommitTs,
    ) -> Vec<Result<Response, FirnError>> {
        let ran = match (&self.ran_otherwise, otherwise) {
            (Some(ran), true) => ran,
            _ => &self.ran,
        };
        let parts = &self.parts;
        let mut take = |shard: ShardId, i: usize| -> Result<Response, FirnError> {
            let (prepared, answers) = by_shard
                .get_mut(&shard)
                .ok_or_else(|| FirnError::Internal("a shard went unanswered".into()))?;
            let prepared = *prepared;
            let step = parts.get(&shard).and_then(|p| match otherwise {
                false => p.steps.get(i),
                true => p.otherwise.as_ref().and_then(|o| o.get(i)),
            });
            let records = matches!(step, Some(TxnStep::Records { .. }));
            answers
                .get_mut(i)
                .map(|a| std::mem::replace(a, Err(FirnError::Internal("taken".into()))))
                .unwrap_or_else(|| Err(FirnError::Internal("a step went unanswered".into())))
                .map(|r| match records {
                    true => records_stamped(r, prepared, at, shard),
                    false => stamped(r, prepared, at),
                })
        };
        ran.iter()
            .map(|ran| match ran {
                Ran::One(shard, i) => take(*shard, *i),
                Ran::Split(pieces, n) => {
                    let answers = pieces
                        .iter()
                        .map(|(shard, i, positions)| Ok((take(*shard, *i)?, positions)))
                        .collect::<Result<Vec<_>, FirnError>>()?;
                    merge(answers, *n)
                }
            })
            .collect()
    }
}

/// Places each of `steps` in the part (its branch `branch`) of the shard of its keys (of
/// its records, for a log append: [`step_shards`]), splitting one whose keys are in several
/// shards; where each went.
fn place(
    parts: &mut BTreeMap<ShardId, Part>,
    steps: Vec<TxnStep>,
    anchor: ShardId,
    shards: &dyn Fn(&TxnStep) -> Vec<ShardId>,
    branch: impl Fn(&mut Part) -> &mut Vec<TxnStep>,
) -> Vec<Ran> {
    let mut ran = Vec::with_capacity(steps.len());
    for step in steps {
        let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
        let placed_in = shards(&step);
        let n = placed_in.len();
        for (i, shard) in placed_in.into_iter().enumerate() {
            by_shard.entry(shard).or_default().push(i);
        }
        if by_shard.len() <= 1 {
            let at = by_shard.into_keys().next().unwrap_or(anchor);
            let list = branch(parts.entry(at).or_default());
            list.push(placed(step, at));
            ran.push(Ran::One(at, list.len() - 1));
            continue;
        }
        let mut pieces = Vec::new();
        for (at, positions) in by_shard {
            let list = branch(parts.entry(at).or_default());
            list.push(placed(piece(&step, &positions), at));
            pieces.push((at, list.len() - 1, positions));
        }
        ran.push(Ran::Split(pieces, n));
    }
    ran
}

/// The part of a step of several keys (or records) that names those at `positions`.
fn piece(step: &TxnStep, positions: &[usize]) -> TxnStep {
    let pick = |keys: &[Key]| positions.iter().map(|&i| keys[i].clone()).collect();
    match step {
        TxnStep::Log(LogWrite::Append { log, records }) => TxnStep::Log(LogWrite::Append {
            log: log.clone(),
            records: positions.iter().map(|&i| records[i].clone()).collect(),
        }),
        TxnStep::Read(KvRead::MGet {
            keys,
            at,
            consistency,
        }) => TxnStep::Read(KvRead::MGet {
            keys: pick(keys),
            at: *at,
            consistency: *consistency,
        }),
        TxnStep::Read(KvRead::Exists { keys, consistency }) => TxnStep::Read(KvRead::Exists {
            keys: pick(keys),
            consistency: *consistency,
        }),
        TxnStep::Write(KvWrite::Delete { keys }) => {
            TxnStep::Write(KvWrite::Delete { keys: pick(keys) })
        }
        TxnStep::Write(KvWrite::MSet { items }) => TxnStep::Write(KvWrite::MSet {
            items: positions.iter().map(|&i| items[i].clone()).collect(),
        }),
        // Every other step names one key.
        other => other.clone(),
    }
}

/// The answers of a step's pieces as the one step's answer.
fn merge(pieces: Vec<(Response, &Vec<usize>)>, n: usize) -> Result<Response, FirnError> {
    let mut values = vec![None; n];
    let mut written = vec![None; n];
    let mut appended = vec![None; n];
    let mut count = None;
    for (answer, positions) in pieces {
        match answer {
            Response::Appended(records) => {
                for (a, &i) in records.into_iter().zip(positions) {
                    appended[i] = Some(a);
                }
            }
            Response::Values(vs) => {
                for (v, &i) in vs.into_iter().zip(positions) {
                    values[i] = Some(v);
                }
            }
            Response::Written(ws) => {
                for (w, &i) in ws.into_iter().zip(positions) {
                    written[i] = Some(w);
                }
            }
            Response::Count(c) => *count.get_or_insert(0) += c,
            other => {
                return Err(FirnError::Internal(format!(
                    "unexpected answer of a step's part: {other:?}"
                )));
            }
        }
    }
    if appended.iter().any(Option::is_some) {
        return appended
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .map(Response::Appended)
            .ok_or_else(|| FirnError::Internal("a record of an append went unanswered".into()));
    }
    Ok(match count {
        Some(c) => Response::Count(c),
        None if values.iter().any(Option::is_some) => {
            Response::Values(values.into_iter().map(Option::flatten).collect())
        }
        None => Response::Written(written.into_iter().flatten().collect()),
    })
}

/// `response` with the versions it wrote stamped `at`: the prepare ran the step at stamp
/// `prepared`, before the commit stamp was known, and the versions are written at `at`.
fn stamped(response: Response, prepared: CommitTs, at: CommitTs) -> Response {
    let stamp = |mut w: Written| {
        if w.commit_ts == prepared {
            w.commit_ts = at;
        }
        w
    };
    match response {
        Response::Written(ws) => Response::Written(ws.into_iter().map(stamp).collect()),
        Response::Changed { written, value } => Response::Changed {
            written: stamp(written),
            value,
        },
        Response::Appended(appended) => Response::Appended(
            appended
                .into_iter()
                .map(|mut a| {
                    if a.commit_ts == prepared {
                        a.commit_ts = at;
                    }
                    a
                })
                .collect(),
        ),
        other => other,
    }
}

/// The answer of a log append's records in a part prepared at `prepared` on `home`, as the
/// resolution gives them at `at`: each record's stamp was `k` logical ticks after the
/// prepare's, and is as many after the commit stamp; its seq is that stamp's in `home`.
fn records_stamped(
    response: Response,
    prepared: CommitTs,
    at: CommitTs,
    home: ShardId,
) -> Response {
    let Response::Appended(records) = response else {
        return response;
    };
    let restamp = |a: Appended| {
        let k = a.commit_ts.logical.saturating_sub(prepared.logical);
        let commit_ts = CommitTs::new(at.wall_us, at.logical.saturating_add(k));
        Appended {
            seq: LogSeq::from_stamp(commit_ts, home),
            commit_ts,
        }
    };
    Response::Appended(records.into_iter().map(restamp).collect())
}
