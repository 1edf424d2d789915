//! The ledger of what actors delivered, kept the same way for every medium: each chunk
//! verified (checksum, schema, the sender's stamp against the channel it came through), its
//! sequence number checked per actor incarnation, and counted.

use std::collections::BTreeMap;

use common::chunk::{Chunk, ChunkSchema};

use super::IncarnationSummary;

/// The channel a chunk came through: an actor's shared-memory ring, or a remote actor's link
/// (where a reconnect may resend a chunk the learner already holds: dropped as a duplicate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Ring,
    Link,
}

impl Channel {
    /// How log lines name the sender and the channel.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Channel::Ring => ("actor", "ring"),
            Channel::Link => ("remote actor", "link"),
        }
    }
}

/// Counts per run and per actor incarnation.
pub struct Ledger {
    pub schema: ChunkSchema,
    pub incarnations: BTreeMap<(u32, u32), IncarnationSummary>,
    pub chunks: u64,
    pub frames: u64,
    /// Ring slots that could not be read (a torn or damaged slot).
    pub corrupted: u64,
    /// Chunks that failed verification or came through another actor's channel.
    pub rejected: u64,
}

impl Ledger {
    pub fn new(schema: ChunkSchema) -> Self {
        Ledger {
            schema,
            incarnations: BTreeMap::new(),
            chunks: 0,
            frames: 0,
            corrupted: 0,
            rejected: 0,
        }
    }

    /// The counts of one actor incarnation (created on first use).
    pub fn incarnation(&mut self, actor_id: u32, incarnation: u32) -> &mut IncarnationSummary {
        self.incarnations
            .entry((actor_id, incarnation))
            .or_insert_with(|| IncarnationSummary {
                actor_id,
                incarnation,
                ..Default::default()
            })
    }

    /// Verifies one encoded chunk that came through the `channel` of actor
    /// `actor_id`/`incarnation`: `None` (counted, logged) when it fails its checksum or schema,
    /// carries another sender's stamp, or (links) was received before.
    pub fn accept(
        &mut self,
        channel: Channel,
        actor_id: u32,
        incarnation: u32,
        bytes: &[u8],
    ) -> Option<Chunk> {
        let (who, medium) = channel.names();
        let chunk = match Chunk::decode_verified(bytes, &self.schema) {
            Ok(chunk) => chunk,
            Err(e) => {
                self.rejected += 1;
                tracing::error!("{who} {actor_id}/{incarnation}: chunk rejected: {e}");
                return None;
            }
        };
        let frames = self.schema.frames() as u64;
        let inc = self.incarnation(actor_id, incarnation);
        if (chunk.meta.actor_id, chunk.meta.incarnation) != (actor_id, incarnation) {
            inc.foreign += 1;
            self.rejected += 1;
            tracing::error!(
                "the {medium} of {who} {actor_id}/{incarnation} delivered a chunk stamped {}/{}: \
                 dropped",
                chunk.meta.actor_id,
                chunk.meta.incarnation
            );
            return None;
        }
        if channel == Channel::Link && inc.last_seq.is_some_and(|last| chunk.meta.seq <= last) {
            inc.duplicates += 1;
            tracing::error!(
                "{who} {actor_id}/{incarnation}: chunk seq {} received again: dropped",
                chunk.meta.seq
            );
            return None;
        }
        let expected = inc.last_seq.map_or(0, |s| s + 1);
        if chunk.meta.seq != expected {
            inc.seq_errors += 1;
            tracing::error!(
                "{who} {actor_id}/{incarnation}: chunk seq {} where {expected} was expected",
                chunk.meta.seq
            );
        }
        inc.last_seq = Some(chunk.meta.seq);
        inc.chunks += 1;
        inc.bytes += bytes.len() as u64;
        self.chunks += 1;
        self.frames += frames;
        Some(chunk)
    }
}
