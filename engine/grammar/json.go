package grammar

// JSONGBNF is a grammar of any JSON object, as a json_object response
// format asks (llama.cpp's grammars/json.gbnf, with its bounds: whitespace
// runs and number digits are bounded (exponents to two digits, so that a
// number fits a float64) so that a model cannot stall the text
// in an endless run of blanks or digits).
const JSONGBNF = `root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws

# Optional space: at most one newline and 20 blanks.
ws ::= | " " | "\n" [ \t]{0,20}
`

// JSON is JSONGBNF compiled.
func JSON() *Grammar {
	g, err := Parse(JSONGBNF)
	if err != nil {
		panic("grammar: the built-in JSON grammar: " + err.Error()) // a broken invariant: the text above
	}
	return g
}
