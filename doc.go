// Package modrun runs Mixture-of-Depths (MoD) Llama models from GGUF files on
// any Vulkan GPU, checked against a pure-Go CPU reference. It is the API for
// embedding modrun in a program:
//
//	model, err := modrun.Open("models/tinystories-mod.gguf", modrun.Options{})
//	...
//	defer model.Close()
//	session := model.NewSession()
//	res, err := session.Generate(ctx, "Once upon", modrun.GenerateOptions{MaxTokens: 40},
//		func(t modrun.Token) error {
//			fmt.Print(t.Text) // t.Routes: what each routed layer did with the token
//			return nil
//		})
//
// Open loads a model on a device (Options: backend, device, routing, context
// length); Model.Info says what it is and where it runs. A Session is one
// sequence: Generate streams its tokens, each with its text (UTF-8 safe) and
// its routing, and stops within one token (in the prompt, one batch) when
// its context is cancelled.
// RoutingMap draws a generation's routing as an image.
//
// # The contract
//
// A Model serves its Sessions one Generate call at a time: a call from
// another goroutine waits its turn (or its ctx). With Options.Parallel
// above 1 on the CPU backend, up to that many Generate calls run at once
// instead, in shared steps (more queue), each giving the tokens it would
// alone; Model.Close then waits for them (or, from a callback, ends them
// with ErrClosed). Vulkan and the reference backend take turns whatever
// Parallel says, for now. A Session takes one call
// of its methods at a time: a second concurrent call returns ErrBusy.
// Beyond that, misuse gives an error at once, never a hang:
//   - From inside a token callback, every method either works or returns
//     ErrBusy at once; none waits on the Generate running the callback.
//     The callback's own session returns ErrBusy (Generate, Tokens, Reset,
//     Close). Everything else works: another session's Generate (it runs in
//     the callback's place, and the outer generation restores its sequence
//     after), Reset and Close; Model.Close (the outer Generate then returns
//     ErrClosed); Model.Profile, Tokenize, NewSession. The runner is idle
//     while a callback runs and is lent to the calls made then: a call
//     another goroutine starts in that window runs in the callback's place
//     too, and the generation resumes after it. A call already waiting when
//     the callback began waits for the whole generation.
//   - A Session's Reset, Close and Tokens never wait for another session.
//   - Every method of a closed Session, of the Sessions of a closed Model,
//     and of a closed Model returns ErrClosed (a second Close included).
//   - Cancelling a Generate keeps every token run so far (Tokens says
//     which, in the prompt too); the next Generate continues after them,
//     with more prompt or none (""), or Reset starts afresh.
//   - A NaN or an infinity in the weights or activations is never hidden
//     behind an ordinary token: Generate stops with ErrNonFinite ("non-finite
//     logits at token N"), on every backend.
//
// The packages, from the leaves up (../shared/DESIGN.md §2): gguf (the file
// format), tokenizer, mod (the model and its CPU reference), vk and shaders
// (Vulkan compute), engine and engine/vulkan (runners, sampling, generation),
// this package, and cmd/modrun (the command line) and cmd/modrun-viewer (a
// desktop window of the live routing). layout_test.go keeps imports pointing
// toward the leaves.
package modrun
