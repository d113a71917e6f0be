//! The usage ceiling: prompt counting and fitting a call into what is left (issue 3).
