//! Recording what the actors delivered (`--save-replay DIR`): every received chunk, in arrival
//! order, appended to a new dataset that `recur-learner replay` trains from.

use std::path::Path;

use common::chunk::{Chunk, ChunkSchema};
use common::dataset::{DatasetWriter, EnvSource};

/// A dataset being recorded, or none.
pub struct Recording(Option<DatasetWriter>);

impl Recording {
    /// Records into a new dataset at `dir` (which must not hold one), or nowhere when `dir`
    /// is `None`; `source` (the env's imports, kwargs and the actors' seed) goes into
    /// `dataset.json`.
    pub fn create(
        dir: Option<&Path>,
        env: &str,
        schema: &ChunkSchema,
        source: &EnvSource,
    ) -> anyhow::Result<Self> {
        let writer = dir.map(|dir| DatasetWriter::create_with_source(dir, env, schema, source));
        Ok(Recording(writer.transpose()?))
    }

    /// Appends `chunks` (each written whole, then indexed).
    pub fn record<'a>(
        &mut self,
        chunks: impl IntoIterator<Item = &'a Chunk>,
    ) -> anyhow::Result<()> {
        if let Some(writer) = &mut self.0 {
            for chunk in chunks {
                writer.append(chunk)?;
            }
        }
        Ok(())
    }
}
