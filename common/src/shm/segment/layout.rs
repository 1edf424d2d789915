//! Checks of the layout words a segment's creator wrote, shared by the ring and the weight
//! segments (each names its own fields).

use std::sync::atomic::Ordering;

use super::{Segment, ShmError};

impl Segment {
    /// A layout word another process wrote at body offset `at`. Relaxed: the creator wrote it
    /// before its Release store of the segment magic, which the open's Acquire load
    /// synchronised with.
    pub(crate) fn layout_word(&self, at: usize) -> u64 {
        self.body_u64(at).load(Ordering::Relaxed)
    }

    /// [`ShmError::Layout`] of this segment: layout field `field` = `value` and why it is wrong.
    pub(crate) fn layout_error(&self, field: &'static str, value: u64, reason: String) -> ShmError {
        ShmError::Layout {
            name: self.name.clone(),
            field,
            value,
            reason,
        }
    }

    /// Checks that the body holds a `kind` segment's `header_len`-byte header (before any of
    /// its words is read).
    pub(crate) fn check_header_len(&self, kind: &str, header_len: usize) -> Result<(), ShmError> {
        if self.body_len() >= header_len {
            return Ok(());
        }
        Err(self.layout_error(
            "body size",
            self.body_len() as u64,
            format!("a {kind} body holds at least its {header_len}-byte header"),
        ))
    }

    /// Checks that the layout word `field` at body offset `at` is `expected` (`why`: what
    /// this process computed it from, or nothing).
    pub(crate) fn check_layout_word(
        &self,
        field: &'static str,
        at: usize,
        expected: usize,
        why: &str,
    ) -> Result<(), ShmError> {
        let found = self.layout_word(at);
        if found == expected as u64 {
            return Ok(());
        }
        Err(self.layout_error(field, found, format!("expected {expected}{why}")))
    }
}
