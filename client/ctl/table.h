#ifndef WSYNC_CLIENT_CTL_TABLE_H_
#define WSYNC_CLIENT_CTL_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace wsync {

// A left-aligned text table with a header row, as kubectl prints them.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string HumanBytes(uint64_t bytes);

}  // namespace wsync

#endif  // WSYNC_CLIENT_CTL_TABLE_H_
