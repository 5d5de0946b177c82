// weir-flows: `validate` and `test` without the runtime, until runtime/main.cc wires
// weir::flows::validate_command and test_command into `weir validate` / `weir test`.
#include <iostream>
#include <string>
#include <vector>

#include "flows/cli.h"

int main(int argc, char** argv) {
  auto usage = [] {
    std::cerr << "usage: weir-flows validate FILE...\n"
                 "       weir-flows test FILE... [--cases FILE]\n";
    return 2;
  };
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  std::vector<std::string> files;
  std::string cases;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (cmd == "test" && a == "--cases") {
      if (i + 1 >= argc) return usage();
      cases = argv[++i];
    } else if (cmd == "test" && a.rfind("--cases=", 0) == 0) {
      cases = a.substr(8);
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      std::cerr << "unknown option " << a << "\n";
      return usage();
    } else {
      files.push_back(a);
    }
  }
  if (cmd == "validate") return weir::flows::validate_command(files, std::cout, std::cerr);
  if (cmd == "test") return weir::flows::test_command(files, cases, std::cout);
  return usage();
}
