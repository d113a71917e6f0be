//! The integration tests, one binary (one link instead of one per file). Each module is one
//! area; modules that need an adapter (Redis, SQLite, PostgreSQL) say so with their own `cfg`.

mod ceiling_support;
mod common;

mod audit_log;
mod ceiling_admission;
mod ceiling_count;
mod ceiling_fit;
mod ceiling_fit_limits;
mod ceiling_props;
mod ceiling_providers;
mod engine_walk;
mod events;
mod fence_races;
mod generic_rules;
mod guard_concurrency;
mod guard_decisions;
mod guard_redis;
mod guard_refusals;
mod health_shared;
mod ledger_attributes;
mod ledger_batch;
mod ledger_fill;
mod ledger_queue;
mod ledger_rows;
mod parsers_fuzz;
mod policy;
mod quota;
mod redis_carry;
mod redis_carry_props;
mod redis_functions;
mod redis_known;
mod refusal_http;
mod store_checks;
mod store_groups;
mod store_groups_expiry;
mod store_groups_races;
mod store_leases;
mod store_leases_errors;
mod store_leases_give_back;
mod store_leases_races;
mod store_leases_review;
mod store_leases_support;
mod store_redis;
mod uncapped_output;
mod windows;
