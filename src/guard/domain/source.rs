//! The sources a call is billed to: direct, a team, or public use.

use std::sync::Arc;

/// Which source a call is billed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    Direct,
    Team,
    Public,
}

impl SourceKind {
    /// Every source kind.
    pub const ALL: [SourceKind; 3] = [SourceKind::Direct, SourceKind::Team, SourceKind::Public];

    /// The word users see (`ticket.source["type"]`); `Display` and `FromStr` use it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Direct => "direct",
            SourceKind::Team => "team",
            SourceKind::Public => "public",
        }
    }
}

/// The source billed: `{"type": "team", "id": "research"}`. Direct sources are named by the
/// person, teams by the team, public use by the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceRef {
    pub kind: SourceKind,
    pub id: Arc<str>,
}

super::words::words!(SourceKind);
