//! A Python `str` read as UTF-8 without a new object per read.
//!
//! Under the abi3-py39 ABI pyo3 reads a `str` through `PyUnicode_AsUTF8String`, which builds a
//! new `bytes` object (re-encoding the text) on every call: for a chat re-sent every turn that
//! was most of a cached recount. `PyUnicode_AsUTF8AndSize` instead keeps the UTF-8 form inside
//! the `str` (none is made for ASCII text, whose storage already is UTF-8) and returns it
//! again on the next read. It is in the stable ABI from 3.10 and exported by every CPython
//! since 3.3, so the abi3-py39 wheel declares it itself; on Windows (where an abi3 extension
//! links to `python3.dll`, which exports it only from 3.10) the copying read stays.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::PyString;

#[cfg(not(windows))]
extern "C" {
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::os::raw::c_char;
}

/// `s`'s text as UTF-8, borrowed from the `str` where the platform allows. A `str` with lone
/// surrogates (not valid UTF-8) is an error, as with `extract::<String>()`. The `str` keeps
/// its UTF-8 form for its lifetime (at most once the size of its text, freed with it).
#[cfg(not(windows))]
pub(crate) fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live `str` (the GIL is held: `Bound`); the returned buffer is owned by
    // it and lives as long as it, which outlives `'a`.
    let data = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
    if data.is_null() {
        return Err(PyErr::fetch(s.py()));
    }
    let len = usize::try_from(size).expect("a str's size is never negative");
    // SAFETY: CPython returns `size` bytes of valid UTF-8 at `data` (it refuses surrogates).
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
    Ok(Cow::Borrowed(unsafe {
        std::str::from_utf8_unchecked(bytes)
    }))
}

/// `s`'s text as UTF-8 (a copy on this platform: see the module doc).
#[cfg(windows)]
pub(crate) fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    s.to_cow()
}
