// The lambdas of a std::visit as one overload set: `std::visit(Overloaded{[](const A&) {...},
// [](B&) {...}}, v)`. Without a generic case, an alternative with no case does not compile.
#pragma once

namespace vramd {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace vramd
