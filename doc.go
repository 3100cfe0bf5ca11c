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
// The packages, from the leaves up (../shared/DESIGN.md §2): gguf (the file
// format), tokenizer, mod (the model and its CPU reference), vk and shaders
// (Vulkan compute), engine and engine/vulkan (runners, sampling, generation),
// this package, and cmd/modrun (the command line) and cmd/modrun-viewer (a
// desktop window of the live routing). layout_test.go keeps imports pointing
// toward the leaves.
package modrun
