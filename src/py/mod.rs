//! The PyO3 layer.
