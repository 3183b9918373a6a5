#ifndef WSYNC_DAEMON_CORE_COMMIT_VERDICT_H_
#define WSYNC_DAEMON_CORE_COMMIT_VERDICT_H_

#include <cstddef>
#include <vector>

namespace wsync {

// What one engine's part in an update's commit was, as WeightGroup::FinishUpdate learnt it.
struct EngineCommitFacts {
  bool committed = false;  // asked to commit, and its commit succeeded
  bool reached = false;    // a bucket of the update was started towards it (it may hold part)
  bool waiting = false;    // already marked as needing a full version before this update
  bool differs = false;    // committed, but the weights check found its weights differ
};

// What the group does with each engine once the commits are in. Engine indexes, in order.
struct CommitPlan {
  // Enough engines committed: all of them, or the group's quorum.
  bool commit_ok = false;
  // Engines that committed and whose weights (when checked) agree: they hold the version.
  std::vector<size_t> holding;
  // The version went on without them (commit_ok): paused, they wait for a full version.
  std::vector<size_t> missed;
  // The update did not land (!commit_ok), and each may hold part of it or a version the group
  // did not take (it committed): its session is closed and it stays paused.
  std::vector<size_t> partial;
  // The update did not land and never reached them, and nothing else holds them back: resumed.
  std::vector<size_t> resume;
};

// The rule, with no I/O: an update commits when at least `needed` engines committed (all or
// nothing when `needed` is the group's size). When it commits, the engines that did not are
// missed; when it does not, every engine it reached or that committed is partial, and one it
// never reached resumes unless it was already waiting for a full version.
CommitPlan PlanCommit(const std::vector<EngineCommitFacts>& engines, size_t needed);

// Whether the version landed on the group: it committed, and the weights check (when it ran)
// either found nothing wrong or, in a quorum group, left enough engines agreeing with none that
// differs still serving.
bool CommitLanded(const CommitPlan& plan, bool check_failed, bool quorum, size_t needed,
                  bool differing_serves);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_COMMIT_VERDICT_H_
