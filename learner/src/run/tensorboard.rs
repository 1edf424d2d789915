//! TensorBoard event files: what SB3, CleanRL, Sample Factory and rl-zoo write, so that recur's
//! runs open in TensorBoard beside theirs.
//!
//! A run writes `RUN_DIR/tb/events.out.tfevents.<secs>.<host>.<pid>.<n>`, one file per process
//! (a resumed run adds one): TensorFlow's record format, each record
//!
//! ```text
//! u64 length (LE) | u32 masked CRC-32C of the length | payload (an Event protobuf) | u32 masked CRC-32C of the payload
//! ```
//!
//! with `masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`. The first event holds
//! `file_version = "brain.Event:2"`; the second a `SessionLog START` at the first step this
//! process can write, so that TensorBoard drops what an earlier process wrote after it (a
//! killed run's rows past its last checkpoint, which `metrics.csv` drops too); then the run's
//! config as a text summary (the text plugin: a string tensor with `plugin_name = "text"`),
//! and one event per `metrics.csv` or `eval.csv` row with the row's values as `simple_value`
//! scalars. Every event is written whole with one `write` and nothing is buffered, so a crash
//! loses at most the row being written, as with the CSV files.
//!
//! The protobuf messages are the few fields of TensorFlow's `event.proto`, `summary.proto`,
//! `tensor.proto` and `tensor_shape.proto` that these events use, derived with prost (same
//! field numbers; prost writes fields in field-number order, as protobuf's own writers do).
//! The unit tests compare the bytes with a file TensorBoard's own writer made, and
//! `tests/learner_cli.rs` reads a real run's file with TensorBoard's `EventAccumulator`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use prost::Message;

/// The messages of TensorFlow's protos that the events use (field numbers as there).
mod proto {
    /// `tensorflow.Event`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(double, tag = "1")]
        pub wall_time: f64,
        #[prost(int64, tag = "2")]
        pub step: i64,
        #[prost(oneof = "What", tags = "3, 5, 7")]
        pub what: Option<What>,
    }

    /// `Event.what`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum What {
        #[prost(string, tag = "3")]
        FileVersion(String),
        #[prost(message, tag = "5")]
        Summary(Summary),
        #[prost(message, tag = "7")]
        SessionLog(SessionLog),
    }

    /// `tensorflow.SessionLog` (`status`: 1 = START).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SessionLog {
        #[prost(int32, tag = "1")]
        pub status: i32,
    }

    /// `tensorflow.Summary`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        #[prost(message, repeated, tag = "1")]
        pub value: Vec<Value>,
    }

    /// `tensorflow.Summary.Value`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Value {
        #[prost(string, tag = "1")]
        pub tag: String,
        #[prost(message, optional, tag = "9")]
        pub metadata: Option<SummaryMetadata>,
        #[prost(oneof = "Kind", tags = "2, 8")]
        pub kind: Option<Kind>,
    }

    /// `Summary.Value.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(float, tag = "2")]
        SimpleValue(f32),
        #[prost(message, tag = "8")]
        Tensor(TensorProto),
    }

    /// `tensorflow.SummaryMetadata`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SummaryMetadata {
        #[prost(message, optional, tag = "1")]
        pub plugin_data: Option<PluginData>,
    }

    /// `SummaryMetadata.PluginData`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PluginData {
        #[prost(string, tag = "1")]
        pub plugin_name: String,
        #[prost(bytes = "vec", tag = "2")]
        pub content: Vec<u8>,
    }

    /// `tensorflow.TensorProto` (`dtype` 7 = DT_STRING).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorProto {
        #[prost(int32, tag = "1")]
        pub dtype: i32,
        #[prost(message, optional, tag = "2")]
        pub tensor_shape: Option<TensorShapeProto>,
        #[prost(bytes = "vec", repeated, tag = "8")]
        pub string_val: Vec<Vec<u8>>,
    }

    /// `tensorflow.TensorShapeProto` (no dimensions: a scalar).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorShapeProto {}
}

use proto::{Event, What};

const FILE_VERSION: &str = "brain.Event:2";
const SESSION_START: i32 = 1;
const DT_STRING: i32 = 7;

/// The tag of the config's text summary.
pub const CONFIG_TAG: &str = "config";

/// TensorFlow's masked CRC-32C (a CRC of data that holds CRCs is weak unmasked).
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One record of the file: length, its masked CRC, the payload, its masked CRC.
pub fn record(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(payload.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
    out
}

fn event(wall_time: f64, step: u64, what: What) -> Event {
    Event {
        wall_time,
        step: i64::try_from(step).unwrap_or(i64::MAX),
        what: Some(what),
    }
}

fn file_version(wall_time: f64) -> Event {
    event(wall_time, 0, What::FileVersion(FILE_VERSION.into()))
}

fn session_start(wall_time: f64, step: u64) -> Event {
    let log = proto::SessionLog {
        status: SESSION_START,
    };
    event(wall_time, step, What::SessionLog(log))
}

/// One event holding `values` as `simple_value` scalars (f32, as TensorBoard stores them);
/// non-finite values are left out.
fn scalars(wall_time: f64, step: u64, values: &[(&str, f64)]) -> Event {
    let value = values
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|&(tag, v)| proto::Value {
            tag: tag.into(),
            metadata: None,
            kind: Some(proto::Kind::SimpleValue(v as f32)),
        })
        .collect();
    event(wall_time, step, What::Summary(proto::Summary { value }))
}

/// A text summary (Markdown) as the text plugin's `text_pb` writes it.
fn text(wall_time: f64, step: u64, tag: &str, markdown: &str) -> Event {
    let tensor = proto::TensorProto {
        dtype: DT_STRING,
        tensor_shape: Some(proto::TensorShapeProto {}),
        string_val: vec![markdown.as_bytes().to_vec()],
    };
    let value = proto::Value {
        tag: tag.into(),
        metadata: Some(proto::SummaryMetadata {
            plugin_data: Some(proto::PluginData {
                plugin_name: "text".into(),
                content: Vec::new(),
            }),
        }),
        kind: Some(proto::Kind::Tensor(tensor)),
    };
    let summary = proto::Summary { value: vec![value] };
    event(wall_time, step, What::Summary(summary))
}

/// A TOML config as the Markdown of a text summary: a fenced code block, shown verbatim.
pub fn config_markdown(toml: &str) -> String {
    format!("```toml\n{}\n```", toml.trim_end())
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// This machine's name for the file name (`localhost` where it cannot be read).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().replace(['/', '\0'], "_"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// An open event file. Errors name the file.
#[derive(Debug)]
pub struct EventFile {
    file: File,
    path: PathBuf,
}

impl EventFile {
    /// Creates a new event file in `dir` (created if missing) and writes its file version:
    /// `events.out.tfevents.<secs>.<host>.<pid>.<n>`, `n` the first number no file has.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| named(dir, e))?;
        let secs = now() as u64;
        let (host, pid) = (host_name(), std::process::id());
        for n in 0u32.. {
            let path = dir.join(format!("events.out.tfevents.{secs}.{host}.{pid}.{n}"));
            match File::options().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let mut events = EventFile { file, path };
                    events.write(&file_version(now()))?;
                    return Ok(events);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(named(&path, e)),
            }
        }
        unreachable!("some number is free")
    }

    /// Appends one event as one record, with one `write` (nothing is buffered).
    fn write(&mut self, event: &Event) -> std::io::Result<()> {
        self.file
            .write_all(&record(&event.encode_to_vec()))
            .map_err(|e| named(&self.path, e))
    }
}

/// `e` with `path` in its message.
pub(crate) fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A run's event file, shared by the threads that write rows (the training loop's
/// `metrics.csv` rows, the evaluation thread's `eval.csv` rows); cloning shares the file.
#[derive(Clone, Debug)]
pub struct TensorBoard {
    file: Arc<Mutex<EventFile>>,
}

impl TensorBoard {
    /// Opens the event file of a run in `run_dir/tb/` whose rows so far end at step `after`
    /// (0 for a new run, the checkpoint's frames for a resumed one; TensorBoard drops later
    /// steps of earlier files), and writes the run's config (`config_toml`) as text at `after`.
    pub fn for_run(run_dir: &Path, after: u64, config_toml: &str) -> std::io::Result<Self> {
        let mut file = EventFile::create(&run_dir.join("tb"))?;
        // A `SessionLog START`: TensorBoard drops the events of earlier files from that step on.
        file.write(&session_start(now(), after.saturating_add(1)))?;
        let config = text(now(), after, CONFIG_TAG, &config_markdown(config_toml));
        file.write(&config)?;
        Ok(TensorBoard {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// `values` as scalars at `step`, written before this returns.
    pub fn scalars(&self, step: u64, values: &[(&str, f64)]) -> std::io::Result<()> {
        // A thread that panicked while writing left at most a torn record behind.
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write(&scalars(now(), step, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four events framed by TensorBoard's own RecordWriter (2.21.0), made by
    /// `learner/testdata/tensorboard/make_known_good.py`.
    const KNOWN_GOOD: &[u8] = include_bytes!("../../testdata/tensorboard/known_good.tfevents");
    const WALL: f64 = 1_700_000_000.25;

    #[test]
    fn records_match_the_bytes_tensorboards_writer_made() {
        let events = [
            file_version(WALL),
            session_start(WALL, 1),
            scalars(
                WALL,
                256,
                &[
                    ("rollout/ep_rew_mean", 21.5),
                    ("rollout/not_yet", f64::NAN),
                    ("train/loss", -0.125),
                ],
            ),
            text(
                WALL,
                0,
                CONFIG_TAG,
                &config_markdown("[run]\nenv = \"CartPole-v1\"\n"),
            ),
        ];
        let ours: Vec<u8> = events
            .iter()
            .flat_map(|e| record(&e.encode_to_vec()))
            .collect();
        assert_eq!(ours.len(), KNOWN_GOOD.len());
        assert!(ours == KNOWN_GOOD, "the bytes differ from TensorBoard's");
    }

    #[test]
    fn the_masked_crc_is_tensorflows() {
        // The first record's header: length 24, then TensorBoard's masked CRC of its 8 bytes.
        assert_eq!(&KNOWN_GOOD[..8], &24u64.to_le_bytes());
        let crc = u32::from_le_bytes(KNOWN_GOOD[8..12].try_into().unwrap());
        assert_eq!(masked_crc32c(&24u64.to_le_bytes()), crc);
        // CRC-32C's check value, and its mask as TensorBoard computes it
        // (`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
    }

    /// Reads back the records of a file, checking both CRCs of each.
    fn read_records(bytes: &[u8]) -> Vec<Event> {
        let mut at = 0;
        let mut events = Vec::new();
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc32c(len_bytes));
            let payload = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc32c(payload));
            events.push(Event::decode(payload).unwrap());
            at += 16 + len;
        }
        events
    }

    #[test]
    fn a_run_file_holds_the_version_the_start_the_config_and_the_rows() {
        let dir = std::env::temp_dir().join(format!("recur-tb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let tb = TensorBoard::for_run(&dir, 512, "[run]\nframes = 9\n").unwrap();
        let shared = tb.clone();
        std::thread::spawn(move || shared.scalars(600, &[("eval/mean_reward", 3.0)]).unwrap())
            .join()
            .unwrap();
        tb.scalars(768, &[("train/loss", 0.5), ("time/fps", 1e3)])
            .unwrap();
        let path = tb.file.lock().unwrap().path.clone();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("events.out.tfevents.")
                && name.ends_with(&format!(".{}.0", std::process::id()))
                && path.parent() == Some(dir.join("tb").as_path()),
            "{}",
            path.display()
        );
        // A second file in the same second of the same process gets the next number.
        let second = EventFile::create(&dir.join("tb")).unwrap();
        assert_ne!(second.path, path);
        let events = read_records(&std::fs::read(&path).unwrap());
        let whats: Vec<(i64, &What)> = events
            .iter()
            .map(|e| (e.step, e.what.as_ref().unwrap()))
            .collect();
        assert!(matches!(whats[0], (0, What::FileVersion(v)) if v == "brain.Event:2"));
        assert!(matches!(whats[1], (513, What::SessionLog(l)) if l.status == SESSION_START));
        let What::Summary(config) = whats[2].1 else {
            panic!("{:?}", whats[2])
        };
        assert_eq!(whats[2].0, 512);
        assert_eq!(config.value[0].tag, CONFIG_TAG);
        let Some(proto::Kind::Tensor(t)) = &config.value[0].kind else {
            panic!("{config:?}")
        };
        assert_eq!(t.string_val, [b"```toml\n[run]\nframes = 9\n```".to_vec()]);
        assert_eq!(events.len(), 5);
        assert_eq!((events[3].step, events[4].step), (600, 768));
        assert_eq!(events[4], {
            let mut e = scalars(0.0, 768, &[("train/loss", 0.5), ("time/fps", 1e3)]);
            e.wall_time = events[4].wall_time;
            e
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full disk (here /dev/full) is reported with the file's path.
    #[test]
    fn a_full_disk_names_the_event_file() {
        let mut file = EventFile {
            file: File::options().write(true).open("/dev/full").unwrap(),
            path: PathBuf::from("/run/tb/events.out.tfevents.x"),
        };
        let err = file
            .write(&scalars(WALL, 1, &[("train/loss", 1.0)]))
            .unwrap_err();
        assert!(
            err.to_string().contains("events.out.tfevents.x")
                && err.to_string().contains("No space left on device"),
            "{err}"
        );
    }
}
