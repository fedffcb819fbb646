import unittest

from fastsum import mean, total


class TestFastsum(unittest.TestCase):
    def test_total(self):
        self.assertEqual(total(0), 0)
        self.assertEqual(total(5), 10)
        self.assertEqual(total(1000), 499500)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)
        self.assertEqual(mean([7]), 7)


if __name__ == "__main__":
    unittest.main()
