// The snippets are compiled and linked, never run: each is a function nobody calls.
int main() { return 0; }
