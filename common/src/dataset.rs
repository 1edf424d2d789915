//! Recorded trajectory datasets: a directory holding `dataset.json` (what was recorded, with
//! the chunk schema) and `chunks.bin` (append-only encoded chunks).
//!
//! `chunks.bin` starts with the 16-byte file header `b"RECURDS1"`, format version (u32 LE) and
//! 4 reserved zero bytes, followed by encoded chunks back to back (see [`crate::chunk`]: each
//! is self-delimiting through its header's `payload_len`). Writers only append whole chunks and
//! flush after each, so a crash mid-write leaves a readable prefix: the reader stops at the
//! last complete chunk and reports how many trailing bytes it ignored.
//!
//! The format is documented for Python in `docs/dataset-format.md`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chunk::{Chunk, ChunkError, ChunkSchema};

pub const FILE_MAGIC: [u8; 8] = *b"RECURDS1";
pub const FORMAT_VERSION: u32 = 1;
pub const META_FILE: &str = "dataset.json";
pub const CHUNKS_FILE: &str = "chunks.bin";

/// `dataset.json`: what the dataset holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetMeta {
    /// Always `"recur-dataset"`.
    pub format: String,
    pub version: u32,
    /// Environment id the chunks come from.
    pub env: String,
    pub schema: ChunkSchema,
    /// `ChunkSchema::hash`, as stamped into every chunk.
    pub schema_hash: u64,
}

/// Why a dataset cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("dataset {path}: {problem}")]
    Format { path: PathBuf, problem: String },
    #[error("dataset {path}: chunk {index} at byte {offset}: {source}")]
    Chunk {
        path: PathBuf,
        index: usize,
        offset: usize,
        #[source]
        source: ChunkError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends chunks to a dataset directory.
pub struct DatasetWriter {
    path: PathBuf,
    schema: ChunkSchema,
    file: BufWriter<File>,
    chunks: u64,
    bytes: u64,
}

impl DatasetWriter {
    /// Creates `dir` (which must not hold a dataset already) and writes its metadata.
    pub fn create(dir: &Path, env: &str, schema: &ChunkSchema) -> Result<Self, DatasetError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let chunks_path = dir.join(CHUNKS_FILE);
        if chunks_path.exists() {
            return Err(DatasetError::Format {
                path: chunks_path,
                problem: "already exists; record into a new directory".into(),
            });
        }
        let meta = DatasetMeta {
            format: "recur-dataset".into(),
            version: FORMAT_VERSION,
            env: env.into(),
            schema: schema.clone(),
            schema_hash: schema.hash(),
        };
        let meta_path = dir.join(META_FILE);
        let text = serde_json::to_string_pretty(&meta).expect("metadata serialises");
        std::fs::write(&meta_path, text + "\n").map_err(io(&meta_path))?;
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&chunks_path)
            .map_err(io(&chunks_path))?;
        let mut file = BufWriter::new(file);
        let mut header = FILE_MAGIC.to_vec();
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        file.write_all(&header).map_err(io(&chunks_path))?;
        file.flush().map_err(io(&chunks_path))?;
        Ok(Self {
            path: chunks_path,
            schema: schema.clone(),
            file,
            chunks: 0,
            bytes: header.len() as u64,
        })
    }

    /// Appends one chunk (whole, then flushed).
    pub fn append(&mut self, chunk: &Chunk) -> Result<(), DatasetError> {
        let bytes = chunk
            .encode(&self.schema)
            .map_err(|source| DatasetError::Chunk {
                path: self.path.clone(),
                index: self.chunks as usize,
                offset: self.bytes as usize,
                source,
            })?;
        self.file.write_all(&bytes).map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))?;
        self.chunks += 1;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    pub fn chunks_written(&self) -> u64 {
        self.chunks
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }
}

/// A dataset read back.
#[derive(Debug)]
pub struct Dataset {
    pub meta: DatasetMeta,
    pub chunks: Vec<Chunk>,
    /// Bytes after the last complete chunk (a write cut short); 0 for a clean file.
    pub ignored_tail_bytes: usize,
}

/// Reads every complete chunk of the dataset in `dir`. A partial chunk at the end (a crash
/// mid-write) is ignored and reported in `ignored_tail_bytes`; a corrupt chunk before the end
/// is an error naming its index and offset.
pub fn read_dataset(dir: &Path) -> Result<Dataset, DatasetError> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let meta: DatasetMeta = serde_json::from_str(&text).map_err(|e| DatasetError::Format {
        path: meta_path.clone(),
        problem: e.to_string(),
    })?;
    if meta.format != "recur-dataset" || meta.version != FORMAT_VERSION {
        return Err(DatasetError::Format {
            path: meta_path,
            problem: format!(
                "format {:?} version {}, this build reads \"recur-dataset\" version {FORMAT_VERSION}",
                meta.format, meta.version
            ),
        });
    }
    let path = dir.join(CHUNKS_FILE);
    let mut bytes = Vec::new();
    File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io(&path))?;
    if bytes.len() < 16 || bytes[0..8] != FILE_MAGIC {
        return Err(DatasetError::Format {
            path,
            problem: "does not start with the RECURDS1 file header".into(),
        });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(DatasetError::Format {
            path,
            problem: format!("file version {version}, this build reads {FORMAT_VERSION}"),
        });
    }
    let mut offset = 16;
    let mut chunks = Vec::new();
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let len = match Chunk::encoded_len(rest) {
            Ok(len) if len <= rest.len() => len,
            // The prefix, header or payload runs past the end: a write cut short.
            Ok(_) | Err(ChunkError::Bounds { .. }) => break,
            Err(source) => {
                return Err(DatasetError::Chunk {
                    path,
                    index: chunks.len(),
                    offset,
                    source,
                })
            }
        };
        let chunk =
            Chunk::decode(&rest[..len], &meta.schema).map_err(|source| DatasetError::Chunk {
                path: path.clone(),
                index: chunks.len(),
                offset,
                source,
            })?;
        chunks.push(chunk);
        offset += len;
    }
    Ok(Dataset {
        meta,
        chunks,
        ignored_tail_bytes: bytes.len() - offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{ActionKind, ChunkMeta};
    use crate::recurrent::CellKind;

    fn schema() -> ChunkSchema {
        ChunkSchema {
            envs: 2,
            steps: 3,
            obs_dim: 2,
            action: ActionKind::Discrete,
            cell: CellKind::Gru,
            num_layers: 1,
            hidden_size: 4,
        }
    }

    fn chunk(seq: u64) -> Chunk {
        let mut c = Chunk::zeros(&schema(), ChunkMeta::new(0, 0, seq, 0));
        c.observation
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = (seq * 100 + i as u64) as f32);
        c
    }

    #[test]
    fn a_write_cut_short_loses_only_the_partial_chunk() {
        let dir = std::env::temp_dir().join(format!("recur-dataset-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w = DatasetWriter::create(&dir, "CartPole-v1", &schema()).unwrap();
        for seq in 0..3 {
            w.append(&chunk(seq)).unwrap();
        }
        drop(w);
        let full = read_dataset(&dir).unwrap();
        assert_eq!(full.chunks.len(), 3);
        assert_eq!(full.ignored_tail_bytes, 0);
        assert_eq!(
            full.chunks[2],
            Chunk::decode(&chunk(2).encode(&schema()).unwrap(), &schema()).unwrap()
        );

        // Cut the file in the middle of the third chunk.
        let path = dir.join(CHUNKS_FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        let one = chunk(0).encode(&schema()).unwrap().len() as u64;
        let cut = len - one / 2;
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut).unwrap();
        let prefix = read_dataset(&dir).unwrap();
        assert_eq!(prefix.chunks.len(), 2);
        assert_eq!(prefix.ignored_tail_bytes as u64, one - one / 2);
        assert_eq!(prefix.chunks[1].meta.seq, 1);

        // Cut inside the second chunk's prefix: one chunk left.
        f.set_len(16 + one + 5).unwrap();
        assert_eq!(read_dataset(&dir).unwrap().chunks.len(), 1);

        // A corrupted byte inside the first chunk is an error naming it, not a silent stop.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[16 + one as usize - 3] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("chunk 0 at byte 16") && err.contains("checksum"),
            "{err}"
        );

        // Recording into an existing dataset is refused.
        assert!(DatasetWriter::create(&dir, "CartPole-v1", &schema()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
