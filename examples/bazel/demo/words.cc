// Counts the words of its arguments, and prints them sorted, with their counts.
#include <iostream>
#include <map>
#include <sstream>
#include <string>

int main(int argc, char **argv) {
    std::map<std::string, int> counts;
    for (int i = 1; i < argc; i++) {
        std::istringstream words(argv[i]);
        std::string word;
        while (words >> word) counts[word]++;
    }
    for (const auto &[word, n] : counts) std::cout << word << ' ' << n << '\n';
    return counts.empty() ? 1 : 0;
}
