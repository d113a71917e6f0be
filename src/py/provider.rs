//! The `provider=` words, converted from Python in this one place: an API word into
//! [`crate::ceiling::Api`] (`Provider`), and an error-shape word into [`HttpShape`]
//! (`ErrorShape`). A bad word is an invalid-argument error naming `provider`, the word and
//! the accepted words; a value that is not a str is a wrong-type error.

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::ceiling::Api;
use crate::ceiling::HttpShape;
use crate::error::Error;

/// The name every provider argument has in Python.
const ARGUMENT: &str = "provider";

/// The words `ErrorShape` accepts, in order.
const SHAPE_WORDS: [&str; 4] = ["openai", "anthropic", "ollama", "gemini"];

fn word(obj: Borrowed<'_, '_, PyAny>, accepted: &str) -> Result<String, Error> {
    if !obj.is_instance_of::<PyString>() {
        let given = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(Error::wrong_type(
            ARGUMENT,
            given,
            format!("must be a str; accepted: {accepted}"),
        ));
    }
    obj.extract::<String>()
        .map_err(|_| Error::invalid(ARGUMENT, "", "must be valid UTF-8 text"))
}

/// A `provider=` argument naming the API a request is sent to (`openai`,
/// `openai.responses`, `anthropic`, `ollama`, ...). Guarantees the word is one of
/// [`Api::WORDS`] or an alias [`Api`]'s `FromStr` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Provider(pub Api);

impl Default for Provider {
    fn default() -> Self {
        Provider(Api::OpenAiChat)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Provider {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let w = word(obj, &Api::WORDS.join(", "))?;
        Ok(Provider(Api::parse(&w, ARGUMENT)?))
    }
}

/// A `provider=` argument naming the error shape a refusal is rendered in: `openai`,
/// `anthropic`, `ollama` or `gemini`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ErrorShape(pub HttpShape);

impl Default for ErrorShape {
    fn default() -> Self {
        ErrorShape(HttpShape::OpenAi)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for ErrorShape {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let accepted = SHAPE_WORDS.join(", ");
        let w = word(obj, &accepted)?;
        let shape = w.parse::<HttpShape>().map_err(|_| {
            Error::invalid(
                ARGUMENT,
                format!("{w:?}"),
                format!("has no error shape; accepted: {accepted}"),
            )
        })?;
        Ok(ErrorShape(shape))
    }
}
