"""What the tests share: model and layer builders, fakes of the authors' code, test images, the toy
mechanism, the browser harness. Test modules import from here, never from one another."""
