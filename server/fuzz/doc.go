// Package fuzz holds the server's fuzz target, apart from server's other
// tests: a fuzz build instruments every package its test binary links, and
// the server's client tests link OpenAI's large Go client and chromedp.
package fuzz
