#include "daemon/core/commit_verdict.h"

namespace wsync {

CommitPlan PlanCommit(const std::vector<EngineCommitFacts>& engines, size_t needed) {
  CommitPlan plan;
  size_t committed = 0;
  for (const EngineCommitFacts& e : engines) committed += e.committed ? 1 : 0;
  plan.commit_ok = committed >= needed;
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineCommitFacts& e = engines[i];
    if (plan.commit_ok) {
      if (!e.committed) {
        plan.missed.push_back(i);
      } else if (!e.differs) {
        plan.holding.push_back(i);
      }
    } else if (e.committed || e.reached) {
      plan.partial.push_back(i);
    } else if (!e.waiting) {
      plan.resume.push_back(i);
    }
  }
  return plan;
}

bool CommitLanded(const CommitPlan& plan, bool check_failed, bool quorum, size_t needed,
                  bool differing_serves) {
  if (!plan.commit_ok) return false;
  if (!check_failed) return true;
  return quorum && plan.holding.size() >= needed && !differing_serves;
}

}  // namespace wsync
