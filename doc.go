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
// A Model runs every Generate call as a sequence of one generation loop
// (engine.Loop): with Options.Parallel up to 1, one sequence at a time on
// the runner (a call from another goroutine queues behind the running
// one, or waits for its ctx); with Parallel above 1 on the CPU and Vulkan,
// up to that many at once in shared steps (more queue), each giving the
// tokens it would alone. The loop steps on a goroutine of its own and
// never waits for a token callback: a generation runs on while its
// callback works, and its tokens wait for the callback in order.
// Model.Close waits for the running calls (or, from a callback, ends them
// with ErrClosed). A Session takes one call of its methods at a time: a
// second concurrent call returns ErrBusy. Beyond that, misuse gives an
// error at once, never a hang:
//   - From inside a token callback, every method either works or returns
//     ErrBusy at once; none waits on the callback. The callback's own
//     session returns ErrBusy (Generate, Tokens, Reset, Close). Everything
//     else works: another session's Generate (it queues behind the running
//     sequence, which the loop runs on meanwhile, so it returns once both
//     have run), Reset and Close; Model.Close (the outer Generate then
//     returns ErrClosed); LogProbs and Profile, which take the runner
//     between two steps of the loop (nothing is ever lent: the loop holds
//     the runner for one step at a time, never across a callback, so a call
//     from any goroutine is served the same way), Tokenize, NewSession.
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
