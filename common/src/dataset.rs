//! Recorded trajectory datasets: a directory holding `dataset.json` (what was recorded, with
//! the chunk schema), append-only chunk files `chunks-00000.bin`, `chunks-00001.bin`, ... and
//! `index.bin` (where every chunk lies).
//!
//! A chunk file starts with the 16-byte file header `b"RECURDS1"`, format version (u32 LE) and
//! 4 reserved zero bytes, followed by encoded chunks back to back (see [`crate::chunk`]: each
//! is self-delimiting through its header's `payload_len`). A writer moves to the next file once
//! the current one holds `max_file_bytes`. `index.bin` starts with `b"RECURIX1"`, version and 4
//! zero bytes, then one 32-byte record per chunk, appended after the chunk's bytes are flushed:
//! `file u32, actor_id u32, offset u64, length u64, seq u64` (LE).
//!
//! Writers only append whole chunks and flush after each, so a crash mid-write leaves a
//! readable prefix: the reader stops at the last complete chunk of the last file and reports
//! how many trailing bytes it ignored (a cut-off tail is shorter than one chunk); a chunk whose
//! index record was not written yet is still read. Anything else that does not read (a
//! corrupted length, header or payload inside the data) is an error naming the file, the chunk
//! and the byte; so is a `dataset.json` that disagrees with its chunks or its environment.
//!
//! Version 3 (this one) stores an observation's images as `u8` columns (`pixels`,
//! `next.pixels`, with their shapes in the schema's `images`) and records episodes under one
//! seed contract for every environment path (docs/dataset-format.md). Datasets of versions 1
//! and 2 are refused, naming their version: record them again.
//!
//! A dataset directory recur creates has mode 0700, its files 0600 (like a run directory).
//!
//! The format is documented for Python in `docs/dataset-format.md`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chunk::{Chunk, ChunkError, ChunkSchema, PREFIX_LEN};

pub const FILE_MAGIC: [u8; 8] = *b"RECURDS1";
pub const INDEX_MAGIC: [u8; 8] = *b"RECURIX1";
pub const FORMAT_VERSION: u32 = 3;
pub const META_FILE: &str = "dataset.json";
pub const INDEX_FILE: &str = "index.bin";
/// Bytes of a chunk or index file header.
pub const FILE_HEADER: usize = 16;
/// Bytes of one index record.
pub const INDEX_RECORD: usize = 32;
/// The most bytes a chunk header takes (bincode varints of a few counters: well under this).
const MAX_HEADER: usize = 256;
/// Default size at which a writer starts the next chunk file.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

/// The name of chunk file `i`.
pub fn chunk_file_name(i: u32) -> String {
    format!("chunks-{i:05}.bin")
}

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
    /// A writer starts the next chunk file once the current one holds this many bytes.
    #[serde(default)]
    pub max_file_bytes: u64,
    /// Python modules imported before `gymnasium.make` (gymnasium ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_imports: Vec<String>,
    /// Keyword arguments of `gymnasium.make` (gymnasium ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_kwargs: Option<serde_json::Value>,
    /// The keys of a gymnasium `Dict` observation that were kept (`run.env_keys`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_keys: Option<Vec<String>>,
    /// The run seed `s`: env `j` of actor `a` (incarnation `k`) reset its episode `n` with
    /// `episode_seed(s ^ (a << 32) ^ (k << 48), j, n)` ([`crate::envs::episode_seed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// Where a dataset's environments come from, beyond the id (recorded in `dataset.json`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvSource {
    pub imports: Vec<String>,
    pub kwargs: Option<serde_json::Value>,
    pub keys: Option<Vec<String>>,
    pub seed: Option<u64>,
}

/// One `index.bin` record: where a chunk lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub file: u32,
    pub actor_id: u32,
    pub offset: u64,
    pub length: u64,
    pub seq: u64,
}

impl IndexEntry {
    fn encode(&self) -> [u8; INDEX_RECORD] {
        let mut b = [0u8; INDEX_RECORD];
        b[0..4].copy_from_slice(&self.file.to_le_bytes());
        b[4..8].copy_from_slice(&self.actor_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.length.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        IndexEntry {
            file: u32_at(0),
            actor_id: u32_at(4),
            offset: u64_at(8),
            length: u64_at(16),
            seq: u64_at(24),
        }
    }
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

fn format_error(path: &Path, problem: impl Into<String>) -> DatasetError {
    DatasetError::Format {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// Appends chunks to a dataset directory.
pub struct DatasetWriter {
    dir: PathBuf,
    schema: ChunkSchema,
    max_file_bytes: u64,
    file: BufWriter<File>,
    file_index: u32,
    /// Bytes in the current file.
    file_bytes: u64,
    index: BufWriter<File>,
    chunks: u64,
    bytes: u64,
}

fn file_header(magic: [u8; 8]) -> Vec<u8> {
    let mut header = magic.to_vec();
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&[0; 4]);
    header
}

/// Creates `path` (which must not exist) holding just `bytes` (a file header, `dataset.json`).
fn create_with(path: &Path, bytes: &[u8]) -> Result<BufWriter<File>, DatasetError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    let mut file = BufWriter::new(file);
    file.write_all(bytes).map_err(io(path))?;
    file.flush().map_err(io(path))?;
    Ok(file)
}

impl DatasetWriter {
    /// Creates `dir` (which must not hold a dataset already) and writes its metadata, recording
    /// the environment's imports, kwargs and seed; chunk files roll over at
    /// [`DEFAULT_MAX_FILE_BYTES`].
    pub fn create_with_source(
        dir: &Path,
        env: &str,
        schema: &ChunkSchema,
        source: &EnvSource,
    ) -> Result<Self, DatasetError> {
        Self::create_with_file_size(dir, env, schema, DEFAULT_MAX_FILE_BYTES, source)
    }

    /// [`create_with_source`](Self::create_with_source) with chunk files of about
    /// `max_file_bytes` each (a file always holds at least one chunk).
    pub fn create_with_file_size(
        dir: &Path,
        env: &str,
        schema: &ChunkSchema,
        max_file_bytes: u64,
        source: &EnvSource,
    ) -> Result<Self, DatasetError> {
        if !dir.exists() {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(dir))?;
        }
        let meta_path = dir.join(META_FILE);
        if meta_path.exists() {
            return Err(format_error(
                &meta_path,
                "already exists; record into a new directory",
            ));
        }
        let meta = DatasetMeta {
            format: "recur-dataset".into(),
            version: FORMAT_VERSION,
            env: env.into(),
            schema: schema.clone(),
            schema_hash: schema.hash(),
            max_file_bytes,
            env_imports: source.imports.clone(),
            env_kwargs: source.kwargs.clone(),
            env_keys: source.keys.clone(),
            seed: source.seed,
        };
        let index = create_with(&dir.join(INDEX_FILE), &file_header(INDEX_MAGIC))?;
        let file = create_with(&dir.join(chunk_file_name(0)), &file_header(FILE_MAGIC))?;
        let text = serde_json::to_string_pretty(&meta).expect("metadata serialises");
        create_with(&meta_path, (text + "\n").as_bytes())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            schema: schema.clone(),
            max_file_bytes,
            file,
            file_index: 0,
            file_bytes: FILE_HEADER as u64,
            index,
            chunks: 0,
            bytes: FILE_HEADER as u64,
        })
    }

    /// Appends one chunk (whole, then flushed), then its index record.
    pub fn append(&mut self, chunk: &Chunk) -> Result<(), DatasetError> {
        let mut path = self.dir.join(chunk_file_name(self.file_index));
        let bytes = chunk
            .encode(&self.schema)
            .map_err(|source| DatasetError::Chunk {
                path: path.clone(),
                index: self.chunks as usize,
                offset: self.file_bytes as usize,
                source,
            })?;
        if self.file_bytes > FILE_HEADER as u64
            && self.file_bytes + bytes.len() as u64 > self.max_file_bytes
        {
            self.file_index += 1;
            path = self.dir.join(chunk_file_name(self.file_index));
            self.file = create_with(&path, &file_header(FILE_MAGIC))?;
            self.file_bytes = FILE_HEADER as u64;
            self.bytes += FILE_HEADER as u64;
        }
        self.file.write_all(&bytes).map_err(io(&path))?;
        self.file.flush().map_err(io(&path))?;
        let entry = IndexEntry {
            file: self.file_index,
            actor_id: chunk.meta.actor_id,
            offset: self.file_bytes,
            length: bytes.len() as u64,
            seq: chunk.meta.seq,
        };
        let index_path = self.dir.join(INDEX_FILE);
        self.index
            .write_all(&entry.encode())
            .map_err(io(&index_path))?;
        self.index.flush().map_err(io(&index_path))?;
        self.chunks += 1;
        self.file_bytes += bytes.len() as u64;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    pub fn chunks_written(&self) -> u64 {
        self.chunks
    }

    /// Bytes of all chunk files.
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
    /// Where each chunk lies (from scanning the files; `index.bin` is checked against it).
    pub locations: Vec<IndexEntry>,
    /// Complete chunks without an index record (a crash between the two writes).
    pub unindexed_chunks: usize,
    /// Index records past the last complete chunk (the data did not reach the disk before a
    /// crash, the index did): ignored.
    pub index_records_past_data: usize,
}

/// Reads `dataset.json`.
pub fn read_meta(dir: &Path) -> Result<DatasetMeta, DatasetError> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let meta: DatasetMeta =
        serde_json::from_str(&text).map_err(|e| format_error(&meta_path, e.to_string()))?;
    if meta.format != "recur-dataset" || meta.version != FORMAT_VERSION {
        let older = if meta.format == "recur-dataset" && meta.version < FORMAT_VERSION {
            " (an earlier recur's: version 3 added image columns and one seed contract for \
             every environment path; record the dataset again)"
        } else {
            ""
        };
        return Err(format_error(
            &meta_path,
            format!(
                "format {:?} version {}, this build reads \"recur-dataset\" version \
                 {FORMAT_VERSION}{older}",
                meta.format, meta.version
            ),
        ));
    }
    check_meta(&meta_path, &meta)?;
    Ok(meta)
}

/// `dataset.json` must agree with itself and with its environment: the schema hash with the
/// schema, the schema's observation width and action kind with the environment's (built as
/// recorded: a gymnasium id with the dataset's `env_imports` and `env_kwargs`).
fn check_meta(path: &Path, meta: &DatasetMeta) -> Result<(), DatasetError> {
    let refuse = |problem: String| format_error(path, problem);
    if meta.schema_hash != meta.schema.hash() {
        return Err(refuse(format!(
            "schema_hash {:#018x} does not match its schema (which hashes to {:#018x})",
            meta.schema_hash,
            meta.schema.hash()
        )));
    }
    // The environment as recorded: a gymnasium id with the dataset's imports and kwargs.
    let registry = crate::envs::Registry::builtin().with_gymnasium(crate::envs::GymnasiumOptions {
        imports: meta.env_imports.clone(),
        kwargs: meta.env_kwargs.clone(),
        keys: meta.env_keys.clone(),
        ..Default::default()
    });
    let policy = registry
        .spec(&meta.env)
        .map(|spec| crate::policy::policy_config_for_spec(&spec))
        .map_err(|e| refuse(format!("env {:?}: {e}", meta.env)))?;
    let env_schema = crate::policy::chunk_schema(&policy, meta.schema.envs, meta.schema.steps);
    if env_schema.obs_dim != meta.schema.obs_dim
        || env_schema.images != meta.schema.images
        || env_schema.action != meta.schema.action
    {
        return Err(refuse(format!(
            "env {:?} has observations of {} values and images {:?} and actions {:?}, the \
             schema {} and {:?} and {:?}",
            meta.env,
            env_schema.obs_dim,
            env_schema.images,
            env_schema.action,
            meta.schema.obs_dim,
            meta.schema.images,
            meta.schema.action
        )));
    }
    Ok(())
}

/// The complete records of `index.bin` (a record cut short by a crash is left out).
pub fn read_index(dir: &Path) -> Result<Vec<IndexEntry>, DatasetError> {
    let path = dir.join(INDEX_FILE);
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    check_file_header(&path, &bytes, INDEX_MAGIC, FORMAT_VERSION)?;
    Ok(bytes[FILE_HEADER..]
        .chunks_exact(INDEX_RECORD)
        .map(IndexEntry::decode)
        .collect())
}

fn check_file_header(
    path: &Path,
    bytes: &[u8],
    magic: [u8; 8],
    version: u32,
) -> Result<(), DatasetError> {
    if bytes.len() < FILE_HEADER || bytes[0..8] != magic {
        return Err(format_error(
            path,
            format!(
                "does not start with the {} file header",
                String::from_utf8_lossy(&magic)
            ),
        ));
    }
    let got = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if got != version {
        return Err(format_error(
            path,
            format!("file version {got}, dataset.json says {version}"),
        ));
    }
    Ok(())
}

/// Reads every complete chunk of the dataset in `dir`, file by file. A partial chunk at the
/// end of the last file (a crash mid-write) is ignored and reported in `ignored_tail_bytes`;
/// a corrupt chunk, a partial chunk in an earlier file, or an index record that disagrees
/// with the files is an error naming the file, chunk and offset.
pub fn read_dataset(dir: &Path) -> Result<Dataset, DatasetError> {
    let meta = read_meta(dir)?;
    let files: Vec<(u32, PathBuf)> = (0u32..)
        .map(|i| (i, dir.join(chunk_file_name(i))))
        .take_while(|(_, p)| p.exists())
        .collect();
    if files.is_empty() {
        return Err(format_error(
            &dir.join(chunk_file_name(0)),
            "missing: the dataset has no chunk file",
        ));
    }
    let mut chunks = Vec::new();
    let mut locations = Vec::new();
    let mut ignored_tail_bytes = 0;
    for (k, (file, path)) in files.iter().enumerate() {
        let bytes = std::fs::read(path).map_err(io(path))?;
        check_file_header(path, &bytes, FILE_MAGIC, meta.version)?;
        let mut offset = FILE_HEADER;
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            // A write cut short leaves less than one chunk; more bytes than that which do not
            // frame a chunk are corruption.
            let could_be_tail = rest.len() < PREFIX_LEN + MAX_HEADER + meta.schema.payload_len();
            let corrupt = |problem: String| {
                format_error(
                    path,
                    format!("chunk {} at byte {offset}: {problem}", chunks.len()),
                )
            };
            let chunk_error = |source| DatasetError::Chunk {
                path: path.clone(),
                index: chunks.len(),
                offset,
                source,
            };
            let len = match Chunk::peek_meta(rest) {
                Ok((m, _)) if m.payload_len != meta.schema.payload_len() as u64 => {
                    return Err(corrupt(format!(
                        "payload_len {} where the schema's chunks hold {} bytes (corrupted)",
                        m.payload_len,
                        meta.schema.payload_len()
                    )))
                }
                Ok((m, header_end)) if header_end + m.payload_len as usize <= rest.len() => {
                    header_end + m.payload_len as usize
                }
                Ok(_) | Err(ChunkError::Bounds { .. }) if could_be_tail => break,
                Ok(_) | Err(ChunkError::Bounds { .. }) => {
                    return Err(corrupt(format!(
                        "{} bytes remain but no chunk frames in them (a corrupted length)",
                        rest.len()
                    )))
                }
                Err(source) => return Err(chunk_error(source)),
            };
            let chunk = Chunk::decode(&rest[..len], &meta.schema).map_err(chunk_error)?;
            locations.push(IndexEntry {
                file: *file,
                actor_id: chunk.meta.actor_id,
                offset: offset as u64,
                length: len as u64,
                seq: chunk.meta.seq,
            });
            chunks.push(chunk);
            offset += len;
        }
        if offset < bytes.len() && k + 1 < files.len() {
            return Err(format_error(
                path,
                format!(
                    "{} bytes of a partial chunk at byte {offset}, but later files follow",
                    bytes.len() - offset
                ),
            ));
        }
        ignored_tail_bytes = bytes.len() - offset;
    }
    let index = read_index(dir)?;
    // Records beyond the data may only point past the last complete chunk.
    let end = locations
        .last()
        .map_or((0, FILE_HEADER as u64), |l| (l.file, l.offset + l.length));
    if let Some(bad) = index[locations.len().min(index.len())..]
        .iter()
        .find(|e| (e.file, e.offset) < end)
    {
        return Err(format_error(
            &dir.join(INDEX_FILE),
            format!(
                "lists {} chunks, the chunk files hold {} complete ones, and record {bad:?} \
                 points inside the data",
                index.len(),
                locations.len()
            ),
        ));
    }
    let index_records_past_data = index.len().saturating_sub(locations.len());
    if let Some((i, (want, got))) = index
        .iter()
        .zip(&locations)
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        return Err(format_error(
            &dir.join(INDEX_FILE),
            format!("record {i} says {want:?}, the files hold {got:?}"),
        ));
    }
    let unindexed_chunks = locations.len().saturating_sub(index.len());
    Ok(Dataset {
        meta,
        chunks,
        ignored_tail_bytes,
        locations,
        unindexed_chunks,
        index_records_past_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{ActionKind, ChunkMeta};
    use recur_rnn::CellKind;

    /// A MaskedCartPole-v1 dataset writer of [`schema`] in `dir`.
    fn writer(dir: &Path) -> DatasetWriter {
        DatasetWriter::create_with_source(
            dir,
            "MaskedCartPole-v1",
            &schema(),
            &EnvSource::default(),
        )
        .unwrap()
    }

    fn schema() -> ChunkSchema {
        ChunkSchema {
            envs: 2,
            steps: 3,
            obs_dim: 2,
            action: ActionKind::Discrete,
            cell: CellKind::Gru,
            num_layers: 1,
            hidden_size: 4,
            images: Vec::new(),
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
        let mut w = writer(&dir);
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

        assert_eq!(full.unindexed_chunks, 0);

        // Cut the file in the middle of the third chunk.
        let path = dir.join(chunk_file_name(0));
        let len = std::fs::metadata(&path).unwrap().len();
        let one = chunk(0).encode(&schema()).unwrap().len() as u64;
        let cut = len - one / 2;
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut).unwrap();
        // The index still lists the third chunk (its bytes did not all reach the disk): the
        // record points past the data and is ignored.
        let ahead = read_dataset(&dir).unwrap();
        assert_eq!(ahead.chunks.len(), 2);
        assert_eq!(ahead.index_records_past_data, 1);
        // A record that disagrees with the data inside it is corruption.
        let index = dir.join(INDEX_FILE);
        let mut ix = std::fs::read(&index).unwrap();
        let saved_ix = ix.clone();
        ix[FILE_HEADER + INDEX_RECORD + 8] ^= 1; // record 1's offset
        std::fs::write(&index, &ix).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(err.contains("record 1 says"), "{err}");
        std::fs::write(&index, &saved_ix).unwrap();
        // A crash before the index write leaves it one record behind.
        let f_index = OpenOptions::new().write(true).open(&index).unwrap();
        f_index
            .set_len((FILE_HEADER + 2 * INDEX_RECORD) as u64)
            .unwrap();
        let prefix = read_dataset(&dir).unwrap();
        assert_eq!(prefix.chunks.len(), 2);
        assert_eq!(prefix.ignored_tail_bytes as u64, one - one / 2);
        assert_eq!(prefix.chunks[1].meta.seq, 1);

        // Cut inside the second chunk's prefix, the index behind by one and a half records:
        // one chunk left, read through the scan although only half its record was written.
        f.set_len(16 + one + 5).unwrap();
        f_index
            .set_len((FILE_HEADER + INDEX_RECORD / 2) as u64)
            .unwrap();
        let one_left = read_dataset(&dir).unwrap();
        assert_eq!(one_left.chunks.len(), 1);
        assert_eq!(one_left.unindexed_chunks, 1);

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
        assert!(DatasetWriter::create_with_source(
            &dir,
            "MaskedCartPole-v1",
            &schema(),
            &EnvSource::default()
        )
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn chunk_files_roll_over_and_the_index_locates_every_chunk() {
        let dir = std::env::temp_dir().join(format!("recur-dataset-roll-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let one = chunk(0).encode(&schema()).unwrap().len() as u64;
        // Two chunks per file.
        let mut w = DatasetWriter::create_with_file_size(
            &dir,
            "MaskedCartPole-v1",
            &schema(),
            16 + 2 * one,
            &EnvSource::default(),
        )
        .unwrap();
        for seq in 0..5 {
            w.append(&chunk(seq)).unwrap();
        }
        assert_eq!(w.file_index + 1, 3, "chunk files started");
        drop(w);
        let data = read_dataset(&dir).unwrap();
        let seqs: Vec<u64> = data.chunks.iter().map(|c| c.meta.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        let index = read_index(&dir).unwrap();
        assert_eq!(index, data.locations);
        assert_eq!(
            index.iter().map(|e| (e.file, e.offset)).collect::<Vec<_>>(),
            [(0, 16), (0, 16 + one), (1, 16), (1, 16 + one), (2, 16)]
        );

        // A partial chunk in a file that is not the last one is corruption, not a crash.
        let first = dir.join(chunk_file_name(0));
        let f = OpenOptions::new().write(true).open(&first).unwrap();
        f.set_len(16 + one + one / 2).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("chunks-00000.bin") && err.contains("later files follow"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 20: a corrupted `payload_len` inside the data (chunk 10 of 80) is an error naming
    /// file, chunk and byte, not a silent stop after 10 chunks; so is a corrupted header length
    /// with a whole chunk's worth of bytes behind it. A `dataset.json` that disagrees with its
    /// schema or environment is refused. The directory is 0700, its files 0600.
    #[test]
    fn corruption_inside_the_data_and_disagreeing_metadata_are_errors() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("recur-dataset-corrupt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w = writer(&dir);
        for seq in 0..80 {
            w.append(&chunk(seq)).unwrap();
        }
        drop(w);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for f in [META_FILE, INDEX_FILE, &chunk_file_name(0)] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        let path = dir.join(chunk_file_name(0));
        let clean = std::fs::read(&path).unwrap();
        let data = read_dataset(&dir).unwrap();
        assert_eq!(data.chunks.len(), 80);
        let at = data.locations[10].offset as usize;
        let (m, _) = Chunk::peek_meta(&clean[at..]).unwrap();
        // Rewrite chunk 10's header with a wrong payload_len (fixed-width integers, as chunk
        // headers are encoded: the header length stays).
        let header_len = u32::from_le_bytes(clean[at + 12..at + 16].try_into().unwrap()) as usize;
        let mut bad = m.clone();
        assert!(m.payload_len < 65_000);
        bad.payload_len = 65_000;
        let config = bincode::config::standard()
            .with_fixed_int_encoding()
            .with_little_endian();
        let encoded = bincode::serde::encode_to_vec(&bad, config).unwrap();
        let mut bytes = clean.clone();
        assert_eq!(encoded.len(), header_len);
        bytes[at + 16..at + 16 + header_len].copy_from_slice(&encoded);
        std::fs::write(&path, &bytes).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("chunks-00000.bin")
                && err.contains(&format!("chunk 10 at byte {at}"))
                && err.contains("payload_len 65000"),
            "{err}"
        );
        // A corrupted header length in chunk 10: the bytes behind it hold 70 chunks.
        let mut bytes = clean.clone();
        bytes[at + 12..at + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("chunks-00000.bin") && err.contains(&format!("chunk 10 at byte {at}")),
            "{err}"
        );
        std::fs::write(&path, &clean).unwrap();
        // dataset.json naming another environment (CartPole-v1: 4 observations, not 2).
        let meta_path = dir.join(META_FILE);
        let meta = std::fs::read_to_string(&meta_path).unwrap();
        std::fs::write(&meta_path, meta.replace("MaskedCartPole-v1", "CartPole-v1")).unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("dataset.json") && err.contains("\"CartPole-v1\" has observations of 4"),
            "{err}"
        );
        // ...or a schema that does not hash to its schema_hash.
        std::fs::write(
            &meta_path,
            meta.replace("\"hidden_size\": 4", "\"hidden_size\": 8"),
        )
        .unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(err.contains("schema_hash"), "{err}");
        // An earlier version's dataset is refused, naming its version.
        std::fs::write(
            &meta_path,
            meta.replace(&format!("\"version\": {FORMAT_VERSION}"), "\"version\": 2"),
        )
        .unwrap();
        let err = read_dataset(&dir).unwrap_err().to_string();
        assert!(
            err.contains("version 2") && err.contains("record the dataset again"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
